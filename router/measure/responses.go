package measure

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

// maxResponseEvent bounds the data of one Responses API event a
// respScanner holds: the closing response.completed repeats the whole
// output, and of one past this only the start is kept, which names its
// type (its usage, at the end, is not read).
const maxResponseEvent = 4 << 20

// respScanner reads an event stream of OpenAI's Responses API fed
// piecewise. Unlike a chat stream, such a stream opens before any token
// (response.created, response.in_progress: vLLM sends both as soon as it
// has the request), so its first token is its first delta event (a type
// ending in ".delta": output text, refusal, reasoning, a tool call's
// arguments), and its usage (input_tokens, output_tokens) is the response
// object's in the event that ends it (response.completed,
// response.incomplete or response.failed). An event's type is read where
// vLLM and OpenAI write it, first (else by a scan of its members), and only
// the event ending the response is decoded, with encoding/json: decoding
// every event took 1.7 µs and 7 allocations an event
// (BenchmarkWriter's responses case).
type respScanner struct {
	line    []byte // the line being read
	data    []byte // the event's data lines so far, joined by LF
	hasData bool
	over    bool // the event's data passed maxResponseEvent: cut there
	prevCR  bool

	events      int       // delta events
	first, last time.Time // of the first and last delta events
	ended       bool      // the event ending the response was read

	usage              bool
	prompt, completion int
	id                 string // the response's, from the event ending it
	createdID          string // the response's, from response.created
}

// responseEnd is what a respScanner reads of the event ending a response.
type responseEnd struct {
	Response *struct {
		ID    string `json:"id"`
		Usage *struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	} `json:"response"`
}

// feed reads p, which was relayed at now, and returns how many delta events
// it ended.
func (s *respScanner) feed(p []byte, now time.Time) int {
	ended := 0
	for len(p) > 0 {
		if s.prevCR {
			s.prevCR = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.add(p)
			return ended
		}
		s.add(p[:i])
		s.prevCR = p[i] == '\r'
		p = p[i+1:]
		if s.endLine(now) {
			ended++
		}
	}
	return ended
}

// add appends b to the line being read, up to the bound.
func (s *respScanner) add(b []byte) {
	if room := maxResponseEvent - len(s.line); len(b) > room {
		b, s.over = b[:max(room, 0)], true
	}
	s.line = append(s.line, b...)
}

// endLine ends the line read: a blank line ends the event. It reports
// whether that event was a delta.
func (s *respScanner) endLine(now time.Time) bool {
	line := s.line
	s.line = s.line[:0]
	if len(line) > 0 {
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			s.hasData = true
			if room := maxResponseEvent - len(s.data); len(v) > room {
				v, s.over = v[:max(room, 0)], true
			}
			s.data = append(s.data, v...)
		}
		return false
	}
	if !s.hasData {
		return false
	}
	delta := false
	switch typ := eventType(s.data); string(typ) {
	case "response.created":
		var created responseEnd // the same shape: {"response":{"id":...}}
		if !s.over && json.Unmarshal(s.data, &created) == nil && created.Response != nil {
			s.createdID = created.Response.ID
		}
	case "response.completed", "response.incomplete", "response.failed":
		s.ended = true
		var end responseEnd
		if !s.over && json.Unmarshal(s.data, &end) == nil && end.Response != nil {
			s.id = end.Response.ID
			if u := end.Response.Usage; u != nil {
				s.usage, s.prompt, s.completion = true, u.InputTokens, u.OutputTokens
			}
		}
	default:
		if bytes.HasSuffix(typ, []byte(".delta")) {
			delta = true
			if s.events == 0 {
				s.first = now
			}
			s.last = now
			s.events++
		}
	}
	s.data, s.hasData, s.over = s.data[:0], false, false
	return delta
}

// maxHead bounds the first bytes of a whole Responses API answer a Writer
// keeps to read its id from: room for the id after some whitespace.
const maxHead = 512

// leadingID returns the "id" of a JSON object whose first member it is,
// as in {"id":"resp_..." (whitespace allowed, as a pretty-printed answer
// has); empty when the first member is another, or the id holds escapes.
func leadingID(b []byte) string {
	b = bytes.TrimLeft(b, " \t\r\n")
	b, ok := bytes.CutPrefix(b, []byte("{"))
	if !ok {
		return ""
	}
	b, ok = bytes.CutPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`"id"`))
	if !ok {
		return ""
	}
	b, ok = bytes.CutPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(":"))
	if !ok {
		return ""
	}
	b, ok = bytes.CutPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`"`))
	if !ok {
		return ""
	}
	if i := bytes.IndexAny(b, `"\`); i > 0 && b[i] == '"' {
		return string(b[:i])
	}
	return ""
}

// endingID is the id of the event ending the response when p completes it
// (its blank line is in p), read by a copy of s that p does not change;
// empty otherwise. Only a stream whose response.created had no id asks.
func (s *respScanner) endingID(p []byte) string {
	if s.createdID != "" || s.ended {
		return ""
	}
	c := respScanner{line: append([]byte(nil), s.line...), data: append([]byte(nil), s.data...), hasData: s.hasData, over: s.over, prevCR: s.prevCR}
	c.feed(p, time.Time{})
	if !c.ended {
		return ""
	}
	return c.id
}

// eventType returns the top-level "type" of an event's data: at once
// where it is the first member, as vLLM and OpenAI write it, else by a scan
// of the object's members; nil when there is none.
func eventType(data []byte) []byte {
	const lead = `{"type":"`
	if rest, ok := bytes.CutPrefix(data, []byte(lead)); ok {
		if i := bytes.IndexAny(rest, `"\`); i >= 0 && rest[i] == '"' {
			return rest[:i]
		}
	}
	var typ []byte
	jsonscan.Object(data, func(key, val []byte) {
		if string(key) == "type" && len(val) >= 2 && val[0] == '"' && bytes.IndexByte(val, '\\') < 0 {
			typ = val[1 : len(val)-1]
		}
	})
	return typ
}
