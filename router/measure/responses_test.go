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

// responseStream is a Responses API stream as vLLM sends one: two events
// before any token, two deltas, the done events and the completed one
// with the usage.
const responseStream = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"usage\":null}}\n\n" +
	"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n" +
	"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"delta\":\"Hel\"}\n\n" +
	": keep-alive\n\n" +
	"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"delta\":\"lo \\\"usage\\\":{\\\"input_tokens\\\":99}\"}\n\n" +
	"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"sequence_number\":4,\"text\":\"Hello\"}\n\n" +
	"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":5,\n" +
	"data: \"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":11,\"output_tokens\":2,\"total_tokens\":13}}}\n\n"

// TestWriterMeasuresAResponseStream: whatever the chunking and line ends,
// the first token is the first delta (the events before it do not start
// the answer), the usage is response.completed's (its data split over two
// lines), and the stream counts as ended.
func TestWriterMeasuresAResponseStream(t *testing.T) {
	for _, body := range []string{responseStream, strings.ReplaceAll(responseStream, "\n", "\r\n"), strings.ReplaceAll(responseStream, "data: ", "data:")} {
		for split := 1; split <= len(body); split += 11 {
			rec := httptest.NewRecorder()
			c := &clock{t: time.Unix(100, 0)}
			w := NewWriter(rec, time.Unix(100, 0), c.now)
			w.Responses = true
			var firstAt int // the byte after which OnFirstByte ran
			w.OnFirstByte = func() { firstAt = rec.Body.Len() }
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for i := 0; i < len(body); i += split {
				if i < len(body)-4 { // the last event's blank line may end it a byte early
					require.False(t, w.ResponseEnded(), "not before its last event")
				}
				_, err := w.Write([]byte(body[i:min(i+split, len(body))]))
				require.NoError(t, err)
			}
			require.Equal(t, body, rec.Body.String(), "relayed unchanged")
			r := w.Result()
			assert.True(t, w.ResponseEnded())
			assert.Equal(t, [3]any{true, 11, 2}, [3]any{r.UsageExact, r.PromptTokens, r.CompletionTokens}, "split %d", split)
			assert.Equal(t, "resp_1", r.ResponseID, "the completed response's id")
			assert.Equal(t, 2, r.Relayed, "two deltas")
			assert.Equal(t, 1, r.Tokens, "one token after the first")
			delta := strings.Index(body, "response.output_text.delta")
			assert.Greater(t, firstAt, delta, "split %d: the answer began with the first delta, not its first byte", split)
			assert.Positive(t, r.TTFT)
		}
	}
}

// TestWriterMeasuresAWholeResponse: a whole Responses answer's usage is
// input_tokens and output_tokens.
func TestWriterMeasuresAWholeResponse(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Unix(100, 0), (&clock{t: time.Unix(100, 0)}).now)
	w.Responses = true
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write([]byte(`{"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"{\"usage\":{\"input_tokens\":9}}"}]}],` +
		`"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}}`))
	require.NoError(t, err)
	r := w.Result()
	assert.Equal(t, [3]any{true, 11, 2}, [3]any{r.UsageExact, r.PromptTokens, r.CompletionTokens})
	assert.Equal(t, "resp_1", r.ResponseID)
	assert.False(t, w.ResponseEnded(), "only a stream ends with an event")
}

// TestAWholeResponsesIDIsItsFirstMember: the id is read where vLLM,
// SGLang and OpenAI write it, first, pretty-printed or not; an answer
// with another member first, or an id with escapes, gives none rather
// than a wrong one.
func TestAWholeResponsesIDIsItsFirstMember(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":"resp_1","object":"response"}`:                             "resp_1",
		"\n{\n  \"id\" :  \"resp_abc-9\",\n  \"object\": \"response\"\n}": "resp_abc-9",
		`{"object":"response","id":"resp_1"}`:                             "",
		`{"id":"resp_\u0031"}`:                                            "",
		`{"id":""}`:                                                       "",
		`{"id":7}`:                                                        "",
		`[{"id":"resp_1"}]`:                                               "",
	} {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, time.Unix(100, 0), (&clock{t: time.Unix(100, 0)}).now)
		w.Responses = true
		w.Header().Set("Content-Type", "application/json")
		for i := range len(body) { // a byte a Write: the id may arrive in pieces
			_, err := w.Write([]byte(body[i : i+1]))
			require.NoError(t, err)
		}
		assert.Equal(t, want, w.Result().ResponseID, "%s", body)
	}
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Unix(100, 0), nil)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion"}`))
	assert.Empty(t, w.Result().ResponseID, "only a Responses API answer has one")
}

// TestAResponseStreamWithoutDeltasBeginsAtItsEnd: a response with no
// delta (nothing generated) begins, for its first token, at the event
// ending it; one cut before that has not ended.
func TestAResponseStreamWithoutDeltasBeginsAtItsEnd(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Unix(100, 0), (&clock{t: time.Unix(100, 0)}).now)
	w.Responses = true
	began := false
	w.OnFirstByte = func() { began = true }
	w.Header().Set("Content-Type", "text/event-stream")
	_, err := w.Write([]byte("data: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n"))
	require.NoError(t, err)
	assert.False(t, began)
	assert.False(t, w.ResponseEnded())
	_, err = w.Write([]byte("data: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n"))
	require.NoError(t, err)
	assert.True(t, began)
	assert.True(t, w.ResponseEnded())
	r := w.Result()
	assert.Equal(t, [3]any{true, 5, 0}, [3]any{r.UsageExact, r.PromptTokens, r.CompletionTokens})
}

// FuzzResponseStream: a Responses stream scanned whole and scanned in two
// pieces, cut anywhere, counts the same deltas and reads the same usage
// and end, whatever the bytes.
func FuzzResponseStream(f *testing.F) {
	f.Add([]byte(responseStream), uint16(17))
	f.Add([]byte(strings.ReplaceAll(responseStream, "\n", "\r\n")), uint16(300))
	f.Add([]byte("data: {\"type\":\"x.delta\"}\r\rdata: {\"type\":\"response.failed\",\"response\":{\"usage\":null}}\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		at := int(cut) % (len(body) + 1)
		t0 := time.Unix(0, 0)
		var whole, split respScanner
		n := whole.feed(body, t0)
		m := split.feed(body[:at], t0)
		m += split.feed(body[at:], t0)
		if n != m || whole.events != split.events || whole.ended != split.ended ||
			whole.usage != split.usage || whole.prompt != split.prompt || whole.completion != split.completion ||
			whole.id != split.id || whole.createdID != split.createdID {
			t.Fatalf("cut at %d: whole %d/%+v, split %d/%+v", at, n, whole, m, split)
		}
		if n != whole.events {
			t.Fatalf("feed returned %d deltas, counted %d", n, whole.events)
		}
		// What endingID reads ahead of the rest is what feeding it finds.
		var head respScanner
		head.feed(body[:at], t0)
		if id := head.endingID(body[at:]); id != "" {
			head.feed(body[at:], t0)
			if !head.ended || head.id != id {
				t.Fatalf("endingID %q, but fed: ended %v, id %q", id, head.ended, head.id)
			}
		}
	})
}

// TestAHugeResponseStillEnds: a response.completed past the bound the
// scanner holds (it repeats the whole output) still ends the stream, and
// a type not written first is found all the same; only the usage at its
// end goes unread.
func TestAHugeResponseStillEnds(t *testing.T) {
	var s respScanner
	t0 := time.Unix(0, 0)
	assert.Equal(t, 1, s.feed([]byte("data: {\"sequence_number\":2,\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"), t0))
	huge := strings.Repeat("x", maxResponseEvent)
	s.feed([]byte(`data: {"type":"response.completed","response":{"output":[{"text":"`+huge+`"}],"usage":{"input_tokens":1,"output_tokens":1}}}`+"\n\n"), t0)
	assert.True(t, s.ended)
	assert.False(t, s.usage)
	assert.LessOrEqual(t, cap(s.data), 2*maxResponseEvent, "held no more than the bound")
}

// TestTheResponseIDIsAnnouncedBeforeTheClientCanUseIt: OnResponseID runs
// once, as soon as the id is known and before the client could continue
// the response: a stream's at its response.created event, long before the
// event ending it; one whose response.created has no id before the event
// ending it is relayed whole; a whole answer's before the bytes holding
// the id; never for an error.
func TestTheResponseIDIsAnnouncedBeforeTheClientCanUseIt(t *testing.T) {
	noCreatedID := strings.Replace(responseStream, `"response":{"id":"resp_1","status":"in_progress"`, `"response":{"status":"in_progress"`, 1)
	whole := `{"id":"resp_1","object":"response","usage":{"input_tokens":1,"output_tokens":1}}`
	for _, tt := range []struct {
		name, ct, body string
		status         int
		before         int // the relayed bytes when it ran are at most this many
		called         bool
	}{
		{"stream", "text/event-stream", responseStream, 200, len(responseStream) - 1, true},
		{"stream without a created id", "text/event-stream", noCreatedID, 200, len(noCreatedID) - 1, true},
		{"whole", "application/json", whole, 200, strings.Index(whole, `resp_1"`) + len("resp_1"), true},
		{"an error", "application/json", `{"id":"resp_1","error":{"message":"no"}}`, 400, 0, false},
	} {
		for split := 1; split <= len(tt.body); split += 7 {
			rec := httptest.NewRecorder()
			w := NewWriter(rec, time.Unix(100, 0), (&clock{t: time.Unix(100, 0)}).now)
			w.Responses = true
			calls, at := 0, -1
			w.OnResponseID = func(id string) {
				calls++
				at = rec.Body.Len()
				assert.Equal(t, "resp_1", id, tt.name)
			}
			w.Header().Set("Content-Type", tt.ct)
			w.WriteHeader(tt.status)
			for i := 0; i < len(tt.body); i += split {
				_, err := w.Write([]byte(tt.body[i:min(i+split, len(tt.body))]))
				require.NoError(t, err)
			}
			if !tt.called {
				assert.Zero(t, calls, tt.name)
				continue
			}
			require.Equal(t, 1, calls, "%s, split %d", tt.name, split)
			assert.LessOrEqual(t, at, tt.before, "%s, split %d: announced before the client could use it", tt.name, split)
			if tt.name == "stream" && split == 1 {
				assert.Equal(t, strings.Index(tt.body, "\n\n")+2, at, "right after response.created")
			}
		}
	}
}
