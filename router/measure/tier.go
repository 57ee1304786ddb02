package measure

import (
	"net/http"
	"strings"
)

// TierWriter stamps the service class that served a request into the
// answer, as OpenAI's answers carry "service_tier": it inserts
// "service_tier":"CLASS" right after the opening brace of a JSON answer
// and of every data event of a stream, and relays every other byte as it
// comes (a byte-level insert, no re-encoding). A backend that sends its own
// service_tier later in the object is not edited; JSON readers keep the
// last of a repeated key, so its value then wins. Use it below a Writer,
// so that the Writer measures the backend's own bytes.
type TierWriter struct {
	http.ResponseWriter
	member []byte // "service_tier":"x"
	comma  bool   // the member was just inserted: a comma goes before the next member, none before "}"

	on     bool // a 2xx JSON or event-stream answer
	stream bool
	done   bool // JSON: the brace was found
	state  int  // stream: 0 line start, 1..5 in "data:", 6 blanks after it, 7 elsewhere in a line
}

// NewTierWriter returns a writer stamping class into what it relays to w.
func NewTierWriter(w http.ResponseWriter, class string) *TierWriter {
	return &TierWriter{ResponseWriter: w, member: []byte(`"service_tier":"` + class + `"`)}
}

// WriteHeader decides whether the answer is stamped.
func (t *TierWriter) WriteHeader(code int) {
	h := t.Header()
	ct := h.Get("Content-Type")
	t.stream = strings.HasPrefix(ct, "text/event-stream")
	t.on = code/100 == 2 && h.Get("Content-Encoding") == "" &&
		(t.stream || strings.HasPrefix(ct, "application/json"))
	if t.on {
		h.Del("Content-Length")
	}
	t.ResponseWriter.WriteHeader(code)
}

// Write relays p with the member inserted where it belongs.
func (t *TierWriter) Write(p []byte) (int, error) {
	if !t.on {
		return t.ResponseWriter.Write(p)
	}
	from := 0
	for i, c := range p {
		if t.comma {
			switch {
			case c == ' ' || c == '\t' || !t.stream && (c == '\n' || c == '\r'):
				continue
			case c == '}' || c == '\n' || c == '\r': // an empty object ({} was {"service_tier":"x",}), or an event's line broken after "{"
				t.comma = false
			default:
				t.comma = false
				if _, err := t.ResponseWriter.Write(p[from:i]); err != nil {
					return from, err
				}
				if _, err := t.ResponseWriter.Write(comma); err != nil {
					return i, err
				}
				from = i
			}
		}
		if t.insertAfter(c) {
			if _, err := t.ResponseWriter.Write(p[from : i+1]); err != nil {
				return from, err
			}
			if _, err := t.ResponseWriter.Write(t.member); err != nil {
				return i + 1, err
			}
			from = i + 1
			t.comma = true
		}
	}
	if _, err := t.ResponseWriter.Write(p[from:]); err != nil {
		return from, err
	}
	return len(p), nil
}

var comma = []byte(",")

// insertAfter advances over c and reports whether the member goes right
// after it.
func (t *TierWriter) insertAfter(c byte) bool {
	if !t.stream {
		if !t.done && c == '{' {
			t.done = true
			return true
		}
		return false
	}
	if c == '\n' || c == '\r' {
		t.state = 0 // a line ends (CRLF is two ends; the second starts nothing)
		return false
	}
	const field = "data:"
	switch {
	case t.state < len(field):
		if c == field[t.state] {
			t.state++
		} else {
			t.state = 7
		}
	case t.state == len(field) || t.state == 6:
		switch c {
		case ' ', '\t':
			t.state = 6
		case '{':
			t.state = 7
			return true
		default:
			t.state = 7
		}
	}
	return false
}

// FlushError flushes the wrapped writer.
func (t *TierWriter) FlushError() error {
	return http.NewResponseController(t.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (t *TierWriter) Flush() { _ = t.FlushError() }

// Unwrap lets http.ResponseController reach the wrapped writer.
func (t *TierWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
