package measure

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chunk is a vLLM chat stream event with the given choices.
func chunk(choices string) string {
	return `data: {"id":"chatcmpl-8c1f","object":"chat.completion.chunk","created":1767225600,` +
		`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[` + choices + "]}\n\n"
}

func content(text string) string {
	return chunk(`{"index":0,"delta":{"content":"` + text + `"},"logprobs":null,"finish_reason":null}`)
}

// The events of a vLLM chat stream asked for usage: a role chunk, four
// content chunks (one tries to look like a usage chunk), a finish chunk with
// the end-of-sequence token, the usage chunk and [DONE].
var (
	roleEvent   = chunk(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`)
	finishEvent = chunk(`{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}`)
	usageEvent  = `data: {"id":"chatcmpl-8c1f","object":"chat.completion.chunk","created":1767225600,` +
		`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],` +
		`"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
	vllmEvents = []string{roleEvent, content("Hello"), content(","), content(` \"choices\":[],\"usage\":{\"prompt_tokens\":1}`),
		content(" world"), finishEvent, usageEvent, doneEvent}
)

// crlf turns a stream's line endings into CRLF.
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// flushRecorder records what was written between flushes.
type flushRecorder struct {
	header  http.Header
	code    int
	body    strings.Builder
	pending strings.Builder
	flushes []string
}

func newFlushRecorder() *flushRecorder { return &flushRecorder{header: http.Header{}} }

func (f *flushRecorder) Header() http.Header { return f.header }
func (f *flushRecorder) WriteHeader(code int) {
	if f.code == 0 {
		f.code = code
	}
}

func (f *flushRecorder) Write(p []byte) (int, error) {
	f.body.Write(p)
	f.pending.Write(p)
	return len(p), nil
}

func (f *flushRecorder) Flush() {
	f.flushes = append(f.flushes, f.pending.String())
	f.pending.Reset()
}

// relay writes pieces through a stripping Writer, flushing after each, and
// returns what the client got and the Writer.
func relay(t *testing.T, pieces []string) (string, *Writer) {
	t.Helper()
	rec := newFlushRecorder()
	w := NewWriter(rec, time.Unix(0, 0), nil)
	w.StripUsageChunk = true
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, p := range pieces {
		n, err := w.Write([]byte(p))
		require.NoError(t, err)
		require.Equal(t, len(p), n)
		w.Flush()
	}
	require.NoError(t, w.Finish())
	return rec.body.String(), w
}

// splits returns ways to cut s: in two at every byte, byte by byte, and at
// random.
func splits(s string) [][]string {
	var out [][]string
	for k := 0; k <= len(s); k++ {
		out = append(out, []string{s[:k], s[k:]})
	}
	bytewise := make([]string, len(s))
	for i := range s {
		bytewise[i] = s[i : i+1]
	}
	out = append(out, bytewise)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var pieces []string
		for rest := s; rest != ""; {
			n := min(1+rng.IntN(80), len(rest))
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		out = append(out, pieces)
	}
	return out
}

func TestStripRemovesOnlyTheUsageChunkWhateverTheSplits(t *testing.T) {
	withUsage := strings.Join(vllmEvents, "")
	var noUsage []string
	for _, e := range vllmEvents {
		if e != usageEvent {
			noUsage = append(noUsage, e)
		}
	}
	usageFirst := strings.Replace(usageEvent, `"choices":[],"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}`,
		`"usage": {"prompt_tokens":12,"completion_tokens":5}, "choices" : [ ]`, 1)
	tests := []struct {
		name   string
		in     string
		want   string
		exact  bool
		prompt int
	}{
		{"vLLM stream", withUsage, strings.Join(noUsage, ""), true, 12},
		{"CRLF", crlf(withUsage), crlf(strings.Join(noUsage, "")), true, 12},
		{"no space after data:", strings.ReplaceAll(withUsage, "data: ", "data:"),
			strings.ReplaceAll(strings.Join(noUsage, ""), "data: ", "data:"), true, 12},
		{"usage before choices", strings.Replace(withUsage, usageEvent, usageFirst, 1), strings.Join(noUsage, ""), true, 12},
		{"no usage chunk", strings.Join(noUsage, ""), strings.Join(noUsage, ""), false, 0},
		{"no usage chunk, CRLF", crlf(strings.Join(noUsage, "")), crlf(strings.Join(noUsage, "")), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pieces := range splits(tt.in) {
				got, w := relay(t, pieces)
				require.Equal(t, tt.want, got, "pieces %q", pieces)
				r := w.Result()
				require.Equal(t, tt.exact, r.UsageExact, "pieces %q", pieces)
				require.Equal(t, tt.prompt, r.PromptTokens)
				if tt.exact {
					require.Equal(t, 5, r.CompletionTokens)
				}
				require.Equal(t, 5, r.Relayed, "four content events and the finish event")
				require.Equal(t, 4, r.Tokens)
			}
		})
	}
}

func TestStripKeepsTheFlushes(t *testing.T) {
	for _, events := range [][]string{vllmEvents, {crlf(roleEvent), crlf(content("a")), crlf(usageEvent), crlf(doneEvent)}} {
		rec := newFlushRecorder()
		w := NewWriter(rec, time.Unix(0, 0), nil)
		w.StripUsageChunk = true
		w.Header().Set("Content-Type", "text/event-stream")
		var want []string
		for _, e := range events {
			_, err := w.Write([]byte(e))
			require.NoError(t, err)
			require.NoError(t, http.NewResponseController(w).Flush())
			if strings.Contains(e, `"choices":[],"usage"`) {
				e = ""
			}
			want = append(want, e)
		}
		require.NoError(t, w.Finish())
		assert.Equal(t, want, rec.flushes, "each event is relayed in its own flush, the usage chunk as nothing")
	}
}

func TestStripFlushesAStreamThatEndsInsideAnEvent(t *testing.T) {
	for _, in := range []string{strings.Join(vllmEvents, ""), crlf(strings.Join(vllmEvents, ""))} {
		start := strings.Index(in, `data: {"id":"chatcmpl-8c1f","object":"chat.completion.chunk","created":1767225600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],`)
		end := start + strings.Index(in[start:], "data: [DONE]")
		dispatched := end // the blank line's LF, or its CR: a following LF is dropped too
		if in[end-1] == '\n' && in[end-2] == '\r' {
			dispatched = end - 1
		}
		closed := start + strings.Index(in[start:], "}}}") + 1 // the usage object's brace
		for cut := 0; cut <= len(in); cut++ {
			want := in[:cut]
			if cut >= dispatched {
				want = in[:start] + in[min(end, cut):cut]
			}
			for _, pieces := range [][]string{{in[:cut]}, {in[:cut/2], in[cut/2 : cut]}} {
				got, w := relay(t, pieces)
				require.Equal(t, want, got, "cut at %d of %q", cut, in)
				assert.Equal(t, cut > closed, w.Result().UsageExact, "cut at %d", cut)
			}
		}
	}
}

func TestStripLeavesOtherChunksAlone(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty choices without usage (a prompt filter chunk)",
			`data: {"choices":[],"prompt_filter_results":[{"prompt_index":0}]}` + "\n\n"},
		{"empty choices, null usage", `data: {"choices":[],"usage":null}` + "\n\n"},
		{"usage in a content chunk", `data: {"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n"},
		{"usage-like text in a string", `data: {"choices":[{"delta":{"content":"{\"choices\":[],\"usage\":{}}"}}]}` + "\n\n"},
		{"nested empty choices", `data: {"choices":[{"delta":{"choices":[],"usage":{"prompt_tokens":1}}}]}` + "\n\n"},
		{"not a data field", `event: {"choices":[],"usage":{"prompt_tokens":1}}` + "\n\n"},
		{"comments and blank lines", ": ping\n\n\n\n: pong\r\n\r\n"},
		{"an unfinished usage object", `data: {"choices":[],"usage":{"prompt_tokens":1}` + "\n\n"},
		{"no blank line at the end", `data: {"choices":[],"usage":{"prompt_tokens":1}}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pieces := range splits(tt.in) {
				got, _ := relay(t, pieces)
				require.Equal(t, tt.in, got, "pieces %q", pieces)
			}
		})
	}
}

func TestStripTakesTheLastRunningUsage(t *testing.T) {
	// vLLM's continuous_usage_stats: running usage in every chunk, which
	// may repeat a count.
	events := []string{
		`data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":7,"total_tokens":8,"completion_tokens":1}}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"c"}}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}` + "\n\n",
	}
	final := `data: {"choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}` + "\n\n"
	cut := strings.Join(events, "")
	got, w := relay(t, []string{cut})
	assert.Equal(t, cut, got)
	r := w.Result()
	assert.True(t, r.UsageExact)
	assert.Equal(t, [2]int{7, 2}, [2]int{r.PromptTokens, r.CompletionTokens}, "a stream cut short keeps the last running usage")

	got, w = relay(t, []string{cut + final + doneEvent})
	assert.Equal(t, cut+doneEvent, got, "only the usage chunk is stripped")
	r = w.Result()
	assert.Equal(t, [2]int{7, 3}, [2]int{r.PromptTokens, r.CompletionTokens}, "the usage chunk comes last")
	assert.Equal(t, 3, r.Relayed)
}

func TestStripRelaysAnEventTooLongToHold(t *testing.T) {
	in := `data: {"choices":[],"usage":{"prompt_tokens":1},"pad":"` + strings.Repeat("x", 2*maxHold) + `"}` + "\n\n" + doneEvent
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Unix(0, 0), nil)
	w.StripUsageChunk = true
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i < len(in); i += 1000 {
		_, err := w.Write([]byte(in[i:min(i+1000, len(in))]))
		require.NoError(t, err)
		require.LessOrEqual(t, len(w.held), maxHold)
	}
	require.NoError(t, w.Finish())
	assert.True(t, in == rec.Body.String(), "held back no longer than maxHold, then relayed")

	got, _ := relay(t, []string{in})
	assert.Equal(t, doneEvent, got, "written whole, it is stripped")
}

func TestStripOnlyTouchesASuccessfulStream(t *testing.T) {
	tests := []struct {
		name     string
		ct       string
		encoding string
		status   int
		strip    bool
	}{
		{"stream", "text/event-stream", "", http.StatusOK, true},
		{"JSON", "application/json", "", http.StatusOK, false},
		{"failed stream", "text/event-stream", "", http.StatusInternalServerError, false},
		{"encoded stream", "text/event-stream", "gzip", http.StatusOK, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			w := NewWriter(rec, time.Unix(0, 0), nil)
			w.StripUsageChunk = true
			w.Header().Set("Content-Type", tt.ct)
			w.Header().Set("Content-Length", "1000")
			if tt.encoding != "" {
				w.Header().Set("Content-Encoding", tt.encoding)
			}
			w.WriteHeader(tt.status)
			_, err := w.Write([]byte(usageEvent))
			require.NoError(t, err)
			require.NoError(t, w.Finish())
			if tt.strip {
				assert.Empty(t, rec.Body.String())
				assert.Empty(t, rec.Header().Get("Content-Length"), "the length changes")
				return
			}
			assert.Equal(t, usageEvent, rec.Body.String())
			assert.Equal(t, "1000", rec.Header().Get("Content-Length"))
		})
	}
}

func TestStripFirstByteIsTheFirstRelayed(t *testing.T) {
	rec := httptest.NewRecorder()
	c := &clock{t: time.Unix(100, 0)}
	w := NewWriter(rec, time.Unix(100, 0), c.now)
	w.StripUsageChunk = true
	calls := 0
	w.OnFirstByte = func() { calls++ }
	w.Header().Set("Content-Type", "text/event-stream")
	for _, p := range []string{": a comment held until its end", "\n\n", roleEvent} {
		_, err := w.Write([]byte(p))
		require.NoError(t, err)
	}
	assert.Equal(t, 1, calls)
	assert.Equal(t, 2*time.Second, w.Result().TTFT, "the first bytes reached the client with the second Write")
}

// failWriter fails every Write.
type failWriter struct{ httptest.ResponseRecorder }

var errGone = errors.New("client gone")

func (f *failWriter) Write([]byte) (int, error) { return 0, errGone }

func TestStripReportsWriteErrors(t *testing.T) {
	f := &failWriter{ResponseRecorder: *httptest.NewRecorder()}
	w := NewWriter(f, time.Unix(0, 0), nil)
	w.StripUsageChunk = true
	w.Header().Set("Content-Type", "text/event-stream")
	_, err := w.Write([]byte(roleEvent + content("a")))
	require.ErrorIs(t, err, errGone)
	_, err = w.Write([]byte(roleEvent[:10]))
	require.NoError(t, err, "held, not written")
	require.ErrorIs(t, w.Finish(), errGone)
	assert.Zero(t, w.Result().Relayed, "nothing reached the client")
}
