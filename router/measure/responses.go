package measure

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// maxResponseEvent bounds the data of one Responses API event a
// respScanner decodes: the closing response.completed repeats the whole
// output, and one past this is skipped (its usage not read) rather than
// held.
const maxResponseEvent = 4 << 20

// respScanner reads an event stream of OpenAI's Responses API fed
// piecewise. Unlike a chat stream, such a stream opens before any token
// (response.created, response.in_progress: vLLM sends both as soon as it
// has the request), so its first token is its first delta event (a type
// ending in ".delta": output text, refusal, reasoning, a tool call's
// arguments), and its usage (input_tokens, output_tokens) is the response
// object's in the event that ends it (response.completed,
// response.incomplete or response.failed). Each event's data is decoded
// whole with encoding/json: this route is not the chat streams' hot path.
type respScanner struct {
	line    []byte // the line being read
	data    []byte // the event's data lines so far, joined by LF
	hasData bool
	over    bool // the event's data passed maxResponseEvent
	prevCR  bool

	events      int       // delta events
	first, last time.Time // of the first and last delta events
	ended       bool      // the event ending the response was read

	usage              bool
	prompt, completion int
}

// responseEvent is what a respScanner reads of an event.
type responseEvent struct {
	Type     string `json:"type"`
	Response *struct {
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
	if len(s.line)+len(b) > maxResponseEvent {
		s.over = true
		return
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
			if len(s.data)+len(v) > maxResponseEvent {
				s.over = true
			} else {
				s.data = append(s.data, v...)
			}
		}
		return false
	}
	if !s.hasData {
		return false
	}
	delta := false
	var ev responseEvent
	if !s.over && json.Unmarshal(s.data, &ev) == nil {
		switch {
		case strings.HasSuffix(ev.Type, ".delta"):
			delta = true
			if s.events == 0 {
				s.first = now
			}
			s.last = now
			s.events++
		case ev.Type == "response.completed" || ev.Type == "response.incomplete" || ev.Type == "response.failed":
			s.ended = true
			if ev.Response != nil && ev.Response.Usage != nil {
				s.usage, s.prompt, s.completion = true, ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens
			}
		}
	}
	s.data, s.hasData, s.over = s.data[:0], false, false
	return delta
}
