package measure

import (
	"net/http"
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
// with every event split in two Writes.
func BenchmarkWriter(b *testing.B) {
	whole := stream500()
	var split []string
	for _, e := range whole {
		split = append(split, e[:len(e)/2], e[len(e)/2:])
	}
	tests := []struct {
		name   string
		writes []string
		strip  bool
	}{
		{"plain", whole, false},
		{"strip", whole, true},
		{"strip_split_events", split, true},
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
				w.StripUsageChunk = tt.strip
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
				if r := w.Result(); r.Relayed != 497 || r.CompletionTokens != 5 {
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
