package loadgen

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeServer is an OpenAI-shaped /v1/completions server that emits one SSE
// chunk per requested token, then usage, then [DONE]. It records what it
// received.
type fakeServer struct {
	t *testing.T
	// handle, if set, replaces the normal answer for a request.
	handle func(w http.ResponseWriter, r *http.Request, body fakeBody) bool

	mu          sync.Mutex
	bodies      []fakeBody
	inFlight    int
	maxInFlight int
}

type fakeBody struct {
	Model         string `json:"model"`
	Prompt        []int  `json:"prompt"`
	MaxTokens     int    `json:"max_tokens"`
	IgnoreEOS     bool   `json:"ignore_eos"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User *string `json:"user"` // nil when the field is absent
}

func newFakeServer(t *testing.T, handle func(http.ResponseWriter, *http.Request, fakeBody) bool) (*fakeServer, *httptest.Server) {
	f := &fakeServer{t: t, handle: handle}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", f.serve)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeServer) received() []fakeBody {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeBody(nil), f.bodies...)
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	var body fakeBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()

	if f.handle != nil && f.handle(w, r, body) {
		return
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
		len(body.Prompt), body.MaxTokens, len(body.Prompt)+body.MaxTokens)
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":%s}`, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i := range body.MaxTokens {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":null}]}\n\n", i)
		require.NoError(f.t, rc.Flush())
	}
	if body.StreamOptions != nil && body.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
