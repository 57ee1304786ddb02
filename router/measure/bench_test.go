package measure

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
func (discard) Flush()                      {}

// stream500 is a vLLM chat stream of 500 events: the role chunk, 496
// content chunks, the finish chunk, the usage chunk and [DONE].
func stream500() []string {
	events := []string{roleEvent}
	words := []string{"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}
	for i := range 496 {
		events = append(events, content(words[i%len(words)]))
	}
	return append(events, finishEvent, usageEvent, doneEvent)
}

// BenchmarkWriter relays a 500-event stream, one Write and Flush per event
// as httputil.ReverseProxy does for a server that flushes every event, or
// with every event split in two Writes; responses is a Responses API
// stream of 500 events.
func BenchmarkWriter(b *testing.B) {
	whole := stream500()
	var split []string
	for _, e := range whole {
		split = append(split, e[:len(e)/2], e[len(e)/2:])
	}
	tests := []struct {
		name               string
		writes             []string
		strip, responses   bool
		relayed, completed int // what the Writer must measure
	}{
		{"plain", whole, false, false, 497, 5},
		{"strip", whole, true, false, 497, 5},
		{"strip_split_events", split, true, false, 497, 5},
		{"responses", responses500(), false, true, 492, 492},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			writes := make([][]byte, len(tt.writes))
			size := 0
			for i, s := range tt.writes {
				writes[i] = []byte(s)
				size += len(s)
			}
			rw := discard{h: http.Header{"Content-Type": {"text/event-stream"}}}
			start := time.Now()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				w := NewWriter(rw, start, nil)
				w.StripUsageChunk, w.Responses = tt.strip, tt.responses
				w.WriteHeader(http.StatusOK)
				for _, p := range writes {
					if _, err := w.Write(p); err != nil {
						b.Fatal(err)
					}
					w.Flush()
				}
				if err := w.Finish(); err != nil {
					b.Fatal(err)
				}
				if r := w.Result(); r.Relayed != tt.relayed || r.CompletionTokens != tt.completed {
					b.Fatalf("measured %+v", r)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/500, "ns/event")
		})
	}
}

func TestStream500(t *testing.T) {
	s := strings.Join(stream500(), "")
	got, w := relay(t, []string{s})
	if want := strings.Replace(s, usageEvent, "", 1); got != want {
		t.Fatal("the usage chunk is not stripped exactly")
	}
	if r := w.Result(); r.Relayed != 497 {
		t.Fatalf("relayed %d", r.Relayed)
	}
}

// responses500 is a Responses API stream of 500 events as vLLM sends one:
// created and in_progress, the item and part opening, 492 text deltas, the
// done events and response.completed repeating the whole text.
func responses500() []string {
	open := `{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"llama-3-8b","output":[],"usage":null}`
	event := func(kind, data string) string { return "event: " + kind + "\ndata: " + data + "\n\n" }
	events := []string{
		event("response.created", `{"type":"response.created","sequence_number":0,"response":`+open+`}`),
		event("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":`+open+`}`),
		event("response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`),
		event("response.content_part.added", `{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`),
	}
	words := []string{"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}
	var text strings.Builder
	for i := range 492 {
		w := words[i%len(words)]
		text.WriteString(w)
		events = append(events, event("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":`+
			strconv.Itoa(i+4)+`,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+w+`","logprobs":[]}`))
	}
	t := strconv.Quote(text.String())
	done := `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":` + t + `,"annotations":[]}]}`
	return append(events,
		event("response.output_text.done", `{"type":"response.output_text.done","sequence_number":496,"item_id":"msg_1","output_index":0,"content_index":0,"text":`+t+`}`),
		event("response.content_part.done", `{"type":"response.content_part.done","sequence_number":497,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":`+t+`,"annotations":[]}}`),
		event("response.output_item.done", `{"type":"response.output_item.done","sequence_number":498,"output_index":0,"item":`+done+`}`),
		event("response.completed", `{"type":"response.completed","sequence_number":499,"response":{"id":"resp_1","object":"response","status":"completed","model":"llama-3-8b","output":[`+
			done+`],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":492,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":504}}}`))
}
