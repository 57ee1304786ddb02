package measure

import "time"

// matcher finds a fixed ASCII pattern in a byte stream fed piecewise,
// ignoring blanks between bytes (so `"choices": []` matches `"choices":[]`).
// On a mismatch it retries the byte as the pattern's first: enough for the
// JSON patterns used here, whose only border is a leading '"' that cannot
// follow a partial match inside valid JSON except as a new token.
type matcher struct {
	pat string
	pos int
}

// feed advances over c and reports whether the pattern just completed.
func (m *matcher) feed(c byte) bool {
	if c == ' ' || c == '\t' {
		return false
	}
	if c != m.pat[m.pos] {
		m.pos = 0
		if c != m.pat[0] {
			return false
		}
	}
	m.pos++
	if m.pos == len(m.pat) {
		m.pos = 0
		return true
	}
	return false
}

// sseScanner counts the server-sent events that carry generated tokens: data
// events whose payload is a JSON object, except the chat stream's opening
// role-only chunk ("role") and the final usage-only chunk (empty
// "choices"). "[DONE]" and other non-object payloads, comments and other
// fields are not counted. An event ends at a blank line.
type sseScanner struct {
	lineStart bool // the next byte starts a line
	prevCR    bool
	field     int  // bytes of "data:" matched at the start of this line, -1: other field
	inData    bool // inside the payload of a data line
	sawFirst  bool // saw the payload's first non-blank byte

	hasData   bool // the event so far has a data line
	object    bool // its payload starts with '{'
	usageOnly bool
	role      bool
	choices   matcher
	roleKey   matcher

	events      int
	first, last time.Time
	started     bool
}

const dataField = "data:"

func (s *sseScanner) scan(p []byte, now time.Time) {
	if !s.started {
		s.started = true
		s.lineStart = true
		s.choices.pat = `"choices":[]`
		s.roleKey.pat = `"role":`
	}
	for _, c := range p {
		if c == '\n' && s.prevCR {
			s.prevCR = false
			continue // the \n of a \r\n
		}
		s.prevCR = c == '\r'
		if c == '\n' || c == '\r' {
			if s.lineStart {
				s.dispatch(now)
			}
			s.lineStart, s.field, s.inData = true, 0, false
			continue
		}
		if s.lineStart {
			s.lineStart = false
			s.field = 0
		}
		switch {
		case s.inData:
			if !s.sawFirst {
				if c == ' ' || c == '\t' {
					continue
				}
				s.sawFirst = true
				s.object = c == '{'
			}
			if s.choices.feed(c) {
				s.usageOnly = true
			}
			if s.roleKey.feed(c) {
				s.role = true
			}
		case s.field >= 0:
			if c != dataField[s.field] {
				s.field = -1
				continue
			}
			s.field++
			if s.field == len(dataField) {
				s.field, s.inData, s.sawFirst = -1, true, false
				s.hasData = true
			}
		}
	}
}

// dispatch ends an event at a blank line.
func (s *sseScanner) dispatch(now time.Time) {
	if s.hasData && s.object && !s.usageOnly && !s.role {
		if s.events == 0 {
			s.first = now
		}
		s.last = now
		s.events++
	}
	s.hasData, s.object, s.usageOnly, s.role = false, false, false, false
	s.choices.pos, s.roleKey.pos = 0, 0
}

// usageScanner finds "completion_tokens": N in a JSON answer fed piecewise
// and keeps the last N seen.
type usageScanner struct {
	key     matcher
	state   int // 0: looking for the key, 1: want ':', 2: want a digit, 3: in digits
	value   int
	tokens  int
	started bool
}

func (u *usageScanner) scan(p []byte) {
	if !u.started {
		u.started = true
		u.key.pat = `"completion_tokens"`
	}
	for _, c := range p {
		switch u.state {
		case 0:
			if u.key.feed(c) {
				u.state = 1
			}
		case 1:
			switch c {
			case ' ', '\t', '\n', '\r':
			case ':':
				u.state = 2
			default:
				u.state = 0
			}
		case 2:
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			case c >= '0' && c <= '9':
				u.value, u.state = int(c-'0'), 3
			default:
				u.state = 0
			}
		case 3:
			if c >= '0' && c <= '9' && u.value < 1<<40 {
				u.value = u.value*10 + int(c-'0')
				continue
			}
			u.tokens, u.state = u.value, 0
		}
	}
}
