package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker/workload"
)

func smallWorkload(t *testing.T, n int) []workload.Request {
	t.Helper()
	reqs, err := workload.Synthetic(workload.SyntheticOptions{
		Rate:   1000,
		Count:  n,
		Prompt: workload.LengthDist{Mean: 40, Sigma: 0.5, Max: 200},
		Output: workload.LengthDist{Mean: 5, Sigma: 0.5, Max: 20},
		Seed:   42,
	})
	require.NoError(t, err)
	return reqs
}

func TestRunStreaming(t *testing.T) {
	fake, srv := newFakeServer(t, nil)
	reqs := smallWorkload(t, 25)
	prompter := workload.NewPrompter(workload.PromptOptions{Seed: 5})
	var progress bytes.Buffer
	r, err := New(Options{Target: srv.URL + "/v1/", Model: "m", Stream: true, Prompter: prompter, Progress: &progress, ProgressInterval: time.Millisecond})
	require.NoError(t, err)

	res := r.Run(context.Background(), reqs)
	require.False(t, res.Interrupted)
	require.Len(t, res.Samples, len(reqs))
	for i, s := range res.Samples {
		require.True(t, s.OK, "request %d: %s", i, s.Err)
		assert.Equal(t, reqs[i].PromptTokens, s.PromptTokens)
		assert.Equal(t, reqs[i].OutputTokens, s.OutputTokens)
		assert.Len(t, s.ITL, reqs[i].OutputTokens-1)
		assert.Positive(t, s.TTFT)
		assert.GreaterOrEqual(t, s.E2E, s.TTFT)
	}
	assert.Equal(t, Progress{Sent: 25, Done: 25}, r.Progress())
	assert.Contains(t, progress.String(), "sent 25  done 25  failed 0  in-flight 0")
	assert.True(t, strings.HasSuffix(progress.String(), "\n"))

	bodies := fake.received()
	require.Len(t, bodies, len(reqs))
	var want, got [][]int
	for i, req := range reqs {
		want = append(want, prompter.Tokens(nil, i, req))
	}
	for _, b := range bodies {
		assert.Equal(t, "m", b.Model)
		assert.True(t, b.IgnoreEOS)
		assert.True(t, b.Stream)
		require.NotNil(t, b.StreamOptions)
		assert.True(t, b.StreamOptions.IncludeUsage)
		got = append(got, b.Prompt)
	}
	assert.ElementsMatch(t, want, got, "every request sends its own prompt")

	rep := res.Report()
	assert.Equal(t, 25, rep.Completed)
	assert.Zero(t, rep.Failed)
}

func TestRunNonStreaming(t *testing.T) {
	fake, srv := newFakeServer(t, nil)
	reqs := smallWorkload(t, 5)
	r, err := New(Options{Target: srv.URL, Model: "m"})
	require.NoError(t, err)
	res := r.Run(context.Background(), reqs)
	require.Len(t, res.Samples, 5)
	for i, s := range res.Samples {
		require.True(t, s.OK, s.Err)
		assert.Equal(t, s.E2E, s.TTFT)
		assert.Empty(t, s.ITL)
		assert.Equal(t, reqs[i].OutputTokens, s.OutputTokens)
	}
	for _, b := range fake.received() {
		assert.False(t, b.Stream)
		assert.Nil(t, b.StreamOptions)
	}
}

// TestRunSendsSessionAsUser checks that a request of a conversation names
// it in the OpenAI "user" field, and that other requests leave it out.
func TestRunSendsSessionAsUser(t *testing.T) {
	fake, srv := newFakeServer(t, nil)
	reqs := []workload.Request{
		{PromptTokens: 3, OutputTokens: 1},
		{PromptTokens: 3, OutputTokens: 2, Session: 7},
		{PromptTokens: 3, OutputTokens: 3, Session: 18446744073709551615},
	}
	r, err := New(Options{Target: srv.URL, Model: "m"})
	require.NoError(t, err)
	res := r.Run(context.Background(), reqs)
	require.Equal(t, 3, res.Report().Completed)
	users := map[int]*string{}
	for _, b := range fake.received() {
		users[b.MaxTokens] = b.User
	}
	assert.Nil(t, users[1], "no session, no user field")
	require.NotNil(t, users[2])
	assert.Equal(t, "conv-7", *users[2])
	require.NotNil(t, users[3])
	assert.Equal(t, "conv-18446744073709551615", *users[3])
	assert.Equal(t, "", SessionUser(0))
}

func TestRunConcurrencyCap(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	fake, srv := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, _ fakeBody) bool {
		select {
		case <-release:
		case <-time.After(20 * time.Millisecond):
		}
		return false
	})
	defer once.Do(func() { close(release) })
	reqs := make([]workload.Request, 12)
	for i := range reqs {
		reqs[i] = workload.Request{PromptTokens: 3, OutputTokens: 2}
	}
	r, err := New(Options{Target: srv.URL, Model: "m", Stream: true, Concurrency: 3})
	require.NoError(t, err)
	res := r.Run(context.Background(), reqs)
	assert.Equal(t, 12, res.Report().Completed)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	assert.LessOrEqual(t, fake.maxInFlight, 3)
}

func TestRunFailures(t *testing.T) {
	_, srv := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, b fakeBody) bool {
		switch b.MaxTokens {
		case 1:
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case 2:
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n") // no [DONE]
		case 3:
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine died\"}}\n\n")
		case 4:
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n") // no usage
		default:
			return false
		}
		return true
	})
	reqs := []workload.Request{
		{PromptTokens: 1, OutputTokens: 1},
		{PromptTokens: 1, OutputTokens: 2},
		{PromptTokens: 1, OutputTokens: 3},
		{PromptTokens: 1, OutputTokens: 4},
		{PromptTokens: 1, OutputTokens: 5},
	}
	r, err := New(Options{Target: srv.URL, Model: "m", Stream: true})
	require.NoError(t, err)
	res := r.Run(context.Background(), reqs)
	require.Len(t, res.Samples, 5)
	assert.Equal(t, "status 503: overloaded", res.Samples[0].Err)
	assert.Equal(t, "stream ended without [DONE]", res.Samples[1].Err)
	assert.Equal(t, "server error in stream: engine died", res.Samples[2].Err)
	assert.True(t, res.Samples[3].OK, "without usage, tokens are counted from chunks")
	assert.Equal(t, 1, res.Samples[3].OutputTokens)
	assert.True(t, res.Samples[4].OK)

	rep := res.Report()
	assert.Equal(t, 2, rep.Completed)
	assert.Equal(t, 3, rep.Failed)
	assert.Equal(t, Progress{Sent: 5, Done: 2, Failed: 3}, r.Progress())
}

func TestRunInterrupt(t *testing.T) {
	arrived := make(chan struct{}, 10)
	_, srv := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, b fakeBody) bool {
		if b.MaxTokens == 1 {
			return false
		}
		arrived <- struct{}{}
		<-r.Context().Done() // hang until the client gives up
		return true
	})
	reqs := []workload.Request{
		{PromptTokens: 1, OutputTokens: 1},
		{PromptTokens: 1, OutputTokens: 7},
		{PromptTokens: 1, OutputTokens: 7},
		{Arrival: time.Hour, PromptTokens: 1, OutputTokens: 1},
	}
	r, err := New(Options{Target: srv.URL, Model: "m", Stream: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result)
	go func() { done <- r.Run(ctx, reqs) }()
	<-arrived
	<-arrived
	require.Eventually(t, func() bool { return r.Progress().Done == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	res := <-done

	assert.True(t, res.Interrupted)
	require.Len(t, res.Samples, 3, "the request due in an hour is never sent")
	assert.True(t, res.Samples[0].OK)
	assert.True(t, res.Samples[1].Cancelled)
	assert.True(t, res.Samples[2].Cancelled)
	rep := res.Report()
	assert.Equal(t, 1, rep.Completed)
	assert.Zero(t, rep.Failed)
	assert.Equal(t, 2, rep.Cancelled)
}

func TestRunRequestTimeout(t *testing.T) {
	_, srv := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, _ fakeBody) bool {
		<-r.Context().Done()
		return true
	})
	r, err := New(Options{Target: srv.URL, Model: "m", RequestTimeout: 10 * time.Millisecond})
	require.NoError(t, err)
	res := r.Run(context.Background(), []workload.Request{{PromptTokens: 1, OutputTokens: 1}})
	require.Len(t, res.Samples, 1)
	assert.False(t, res.Samples[0].Cancelled)
	assert.Equal(t, "request timed out after 10ms", res.Samples[0].Err)
	assert.False(t, res.Interrupted)
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no target", Options{Model: "m"}, "want an http or https URL"},
		{"bad scheme", Options{Target: "ftp://x", Model: "m"}, "want an http or https URL"},
		{"no model", Options{Target: "http://x"}, "model is required"},
		{"negative concurrency", Options{Target: "http://x", Model: "m", Concurrency: -1}, "concurrency -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestCompletionsURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://h:8000", "http://h:8000/v1/completions"},
		{"http://h:8000/", "http://h:8000/v1/completions"},
		{"http://h:8000/v1", "http://h:8000/v1/completions"},
		{"https://h/prefix/v1/", "https://h/prefix/v1/completions"},
	}
	for _, tt := range tests {
		got, err := completionsURL(tt.in)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestSeveralTargetsShareTheRequests(t *testing.T) {
	var hits [2]atomic.Int64
	var srvs []*httptest.Server
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits[i].Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		}))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	reqs := make([]workload.Request, 10)
	for i := range reqs {
		reqs[i] = workload.Request{Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 4, OutputTokens: 1}
	}
	r, err := New(Options{Target: srvs[0].URL + "," + srvs[1].URL, Model: "m",
		Prompter: workload.NewPrompter(workload.PromptOptions{Seed: 1})})
	require.NoError(t, err)
	res := r.Run(context.Background(), reqs)
	require.Len(t, res.Samples, 10)
	assert.EqualValues(t, 5, hits[0].Load())
	assert.EqualValues(t, 5, hits[1].Load())
}
