package measure

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock advances by one second on every reading.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

const chatStream = "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
	"data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\\"choices\\\":[] \\\"role\\\":\"}}]}\n\n" +
	"data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"x\",\"choices\": [ ],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3}}\n\n" +
	"data: [DONE]\n\n"

func TestSSECountsTokenEventsWhateverTheChunking(t *testing.T) {
	for _, body := range []string{chatStream, strings.ReplaceAll(chatStream, "\n", "\r\n"), strings.ReplaceAll(chatStream, "data: ", "data:")} {
		for split := 1; split <= len(body); split += 7 {
			var s sseScanner
			t0 := time.Unix(0, 0)
			for i := 0; i < len(body); i += split {
				scan(&s, []byte(body[i:min(i+split, len(body))]), t0.Add(time.Duration(i)))
			}
			require.Equal(t, 3, s.events, "split %d of %q", split, body[:20])
			assert.False(t, s.last.Before(s.first))
			assert.Equal(t, [3]any{true, 3, 3}, [3]any{s.doc.usage, s.doc.prompt, s.doc.completion})
		}
	}
}

func TestSSEIgnoresOtherFieldsAndPayloads(t *testing.T) {
	var s sseScanner
	scan(&s, []byte("event: ping\ndata: 1\n\nid: 3\n\nretry: 5\n\nnodata: {}\n\ndata: {}\ndata: {}\n\n"), time.Unix(1, 0))
	assert.Equal(t, 1, s.events, "only the last event has a JSON object payload (two data lines, one event)")
}

// scan feeds p to s, as a Writer does.
func scan(s *sseScanner, p []byte, now time.Time) {
	for len(p) > 0 {
		n, _ := s.next(p, now)
		p = p[n:]
	}
}

func TestWriterMeasuresAStream(t *testing.T) {
	rec := httptest.NewRecorder()
	c := &clock{t: time.Unix(100, 0)}
	start := time.Unix(100, 0)
	w := NewWriter(rec, start, c.now)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, ev := range strings.SplitAfter(chatStream, "\n\n") {
		if ev == "" {
			continue
		}
		_, err := w.Write([]byte(ev))
		require.NoError(t, err)
		require.NoError(t, http.NewResponseController(w).Flush())
	}
	assert.True(t, rec.Flushed, "flushes reach the wrapped writer")
	assert.Equal(t, chatStream, rec.Body.String(), "bytes relayed unchanged")
	r := w.Result()
	assert.True(t, r.Stream)
	assert.Equal(t, time.Second, r.TTFT, "first body byte at the first clock reading")
	assert.Equal(t, 2, r.Tokens, "three token events (the finish chunk counts): two after the first")
	assert.Equal(t, 3*time.Second, r.Decode, "from the 2nd write (first token) to the 5th (the finish chunk), one second each")
	assert.Equal(t, 3, r.Relayed)
	assert.True(t, r.UsageExact)
	assert.Equal(t, 3, r.PromptTokens)
	assert.Equal(t, 3, r.CompletionTokens)
}

func TestWriterMeasuresAWholeAnswer(t *testing.T) {
	rec := httptest.NewRecorder()
	c := &clock{t: time.Unix(100, 0)}
	w := NewWriter(rec, time.Unix(100, 0), c.now)
	w.Header().Set("Content-Type", "application/json")
	body := `{"id":"x","choices":[{"message":{"content":"\"completion_tokens\": 99"}}],"usage":{"prompt_tokens":5,"completion_tokens_details":{"reasoning_tokens":0}, "completion_tokens" : 42,"total_tokens":47}}`
	for i := 0; i < len(body); i += 10 {
		_, err := w.Write([]byte(body[i:min(i+10, len(body))]))
		require.NoError(t, err)
	}
	r := w.Result()
	assert.Equal(t, http.StatusOK, r.Status)
	assert.False(t, r.Stream)
	assert.Zero(t, r.TTFT, "no TTFT for a whole answer")
	assert.Equal(t, 42, r.Tokens)
	assert.True(t, r.UsageExact)
	assert.Equal(t, 5, r.PromptTokens)
	assert.Equal(t, 42, r.CompletionTokens)
	assert.Zero(t, r.Relayed, "no events in a whole answer")
	assert.Equal(t, time.Duration((len(body)+9)/10)*time.Second, r.Decode)
}

func TestWriterIgnoresErrors(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Unix(0, 0), nil)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("data: {}\n\ndata: {}\n\n"))
	assert.Equal(t, Result{Status: http.StatusServiceUnavailable, Stream: true}, w.Result())
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

func BenchmarkSSEScan(b *testing.B) {
	p := []byte(chatStream)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	var s sseScanner
	now := time.Unix(0, 0)
	for b.Loop() {
		scan(&s, p, now)
	}
}

func TestWriterCallsOnFirstByteOnce(t *testing.T) {
	rec := httptest.NewRecorder()
	c := &clock{t: time.Unix(100, 0)}
	w := NewWriter(rec, time.Unix(100, 0), c.now)
	calls := 0
	w.OnFirstByte = func() { calls++ }
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	assert.Zero(t, calls, "headers are not the first token")
	for range 3 {
		_, err := w.Write([]byte("data: {}\n\n"))
		require.NoError(t, err)
	}
	assert.Equal(t, 1, calls)
}

// AfterFirstFlush runs once, after the first token has been flushed to
// the client, not before.
func TestWriterCallsAfterFirstFlushOnceTheTokenIsOut(t *testing.T) {
	rec := newFlushRecorder()
	w := NewWriter(rec, time.Unix(100, 0), nil)
	calls := 0
	w.AfterFirstFlush = func() {
		calls++
		assert.Equal(t, []string{"", "data: {}\n\n"}, rec.flushes, "the first token was flushed before")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.Flush()
	assert.Zero(t, calls, "a flush of the headers alone")
	for range 3 {
		_, err := w.Write([]byte("data: {}\n\n"))
		require.NoError(t, err)
		assert.NoError(t, w.FlushError())
	}
	assert.Equal(t, 1, calls)
}
