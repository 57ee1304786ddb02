package measure

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"time"
)

// signal is where sseScanner.next stopped.
type signal uint8

const (
	sigNone     signal = iota // the input ran out
	sigStart                  // the next byte begins an event
	sigPlain                  // the event in progress cannot be the usage chunk
	sigEnd                    // the last byte read ended an event
	sigTokenEnd               // it ended a token-carrying event
	sigUsageEnd               // it ended the usage chunk
)

// sseScanner reads a server-sent event stream fed piecewise. It counts the
// events that carry generated tokens: data events whose payload is a JSON
// object, except the chat stream's opening role chunk (one with a "role")
// and chunks whose "choices" is empty, such as the final usage chunk.
// "[DONE]" and other payloads, comments and other fields are not counted. An
// event ends at a blank line. The payloads are read by a jsonScanner, which
// keeps the last usage object seen in any chunk.
type sseScanner struct {
	midLine bool // inside a line
	prevCR  bool // the last byte was a CR, so an LF now is part of it
	field   int  // bytes of "data:" matched at the start of this line; -1: another field
	inData  bool // inside the payload of a data line
	inEvent bool // a line has started since the last blank line
	hasData bool // the event has a data line
	plain   bool // sigPlain was returned for this event
	doc     jsonScanner

	events      int
	first, last time.Time
}

const dataField = "data:"

// next reads p until the input runs out or something the caller must act
// on happens, and returns how many bytes it read and what happened. It
// returns sigStart without reading the event's first byte, so that byte is
// p[n].
func (s *sseScanner) next(p []byte, now time.Time) (int, signal) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.prevCR {
			s.prevCR = false
			if c == '\n' {
				continue
			}
		}
		if c == '\n' || c == '\r' {
			s.prevCR = c == '\r'
			if s.midLine {
				s.midLine, s.inData = false, false
				continue
			}
			if s.inEvent {
				return i + 1, s.dispatch(now)
			}
			continue
		}
		if !s.midLine {
			if !s.inEvent {
				s.inEvent = true
				return i, sigStart
			}
			s.midLine, s.field = true, 0
		}
		switch {
		case s.inData:
			j := lineEnd(p[i:])
			s.doc.feed(p[i : i+j])
			i += j - 1
			if !s.plain && s.doc.d.plain() {
				s.plain = true
				return i + 1, sigPlain
			}
		case s.field >= 0:
			if c != dataField[s.field] {
				s.field = -1
				continue
			}
			s.field++
			if s.field == len(dataField) {
				s.field, s.inData, s.hasData = -1, true, true
			}
		}
	}
	return len(p), sigNone
}

// lineEnd returns the index of the first CR or LF in b, or len(b).
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	if r := bytes.IndexByte(b[:n], '\r'); r >= 0 {
		n = r
	}
	return n
}

// dispatch ends an event at a blank line.
func (s *sseScanner) dispatch(now time.Time) signal {
	d := &s.doc.d
	sig := sigEnd
	switch {
	case !s.hasData:
	case d.usageChunk():
		sig = sigUsageEnd
	case d.object && d.choices != choicesEmpty && !d.role:
		sig = sigTokenEnd
		if s.events == 0 {
			s.first = now
		}
		s.last = now
		s.events++
	}
	s.inEvent, s.hasData, s.plain = false, false, false
	s.doc.d = docState{}
	return sig
}

// jsonScanner reads one JSON document fed piecewise (a whole answer, or the
// payload of one event, after which d is reset) and keeps the last complete
// top-level "usage" object it saw. It tracks strings and nesting, so text
// inside a string never looks like a key.
type jsonScanner struct {
	d docState

	usage              bool // a usage object was seen
	prompt, completion int  // its prompt_tokens and completion_tokens
}

// docState is the state of one document.
type docState struct {
	depth  int
	arrays uint64 // bit k: the container at depth k+1 is an array

	inStr, esc bool
	wantKey    bool // the next string is a member name
	inKey      bool
	keyBad     bool // the name is too long or escaped: none that matters
	keyLen     int
	key        [len("completion_tokens")]byte
	field      field // the member whose value comes next

	started, object, closed bool // saw the first byte; it was '{'; the top level closed
	choices                 choicesKind
	openChoices             bool // just read `"choices":[`
	role                    bool // a "role" member
	inUsage                 bool // inside the top-level usage object
	usageObj                bool // a top-level usage object closed
	usageOther              bool // a top-level usage is not an object (null)

	inNum              bool
	numField           field
	num                int
	prompt, completion int
}

type field uint8

const (
	fieldNone field = iota
	fieldChoices
	fieldUsage
	fieldPrompt
	fieldCompletion
)

type choicesKind uint8

const (
	choicesUnseen choicesKind = iota
	choicesEmpty
	choicesFull // not empty, or not an array
)

// plain reports that the document cannot be a usage chunk.
func (d *docState) plain() bool {
	return (d.started && !d.object) || d.choices == choicesFull || d.usageOther ||
		(d.closed && !d.usageChunk())
}

// usageChunk reports that the document is a complete usage chunk: an object
// whose choices is empty and whose usage is an object.
func (d *docState) usageChunk() bool {
	return d.object && d.closed && d.choices == choicesEmpty && d.usageObj
}

func (j *jsonScanner) feed(p []byte) {
	d := &j.d
	// First what the last piece left open, so that the loop below need not
	// ask about it at every byte (issue 12).
	i := 0
	if d.inStr {
		i = j.str(p, 0)
	}
	if d.inNum {
		i = j.number(p, i)
	}
	for !d.started && i < len(p) {
		if c := p[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			d.started, d.object = true, c == '{'
			break
		}
		i++
	}
	if d.openChoices {
		i = d.choicesOpened(p, i)
	}
	for ; i < len(p); i++ {
		switch c := p[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			k := i + 1 + stringEnd(p[i+1:])
			whole := k < len(p) && p[k] == '"'
			switch {
			case !d.wantKey:
				d.value(c)
				if whole { // the whole value is here: skip it
					i = k
					continue
				}
				d.inStr = true
			case whole: // the whole name is here: no need to copy it
				d.endKey(p[i+1 : k])
				i = k
				continue
			default:
				d.inStr, d.inKey, d.keyBad, d.keyLen = true, true, false, 0
			}
			i = j.str(p, i+1) - 1
		case '{':
			d.value(c)
			d.push(false)
			d.wantKey = d.inObject()
		case '[':
			d.value(c)
			d.push(true)
			d.wantKey = false
			if d.openChoices {
				i = d.choicesOpened(p, i+1) - 1
			}
		case '}', ']':
			if c == '}' && d.inUsage && d.depth == 2 {
				d.inUsage, d.usageObj = false, true
				j.usage, j.prompt, j.completion = true, d.prompt, d.completion
			}
			if d.depth > 0 {
				d.depth--
				d.closed = d.depth == 0
			}
			d.wantKey = false
		case ':':
			d.wantKey = false
		case ',':
			d.field = fieldNone
			d.wantKey = d.inObject()
		default: // a number or literal
			d.value(c)
			if d.inNum {
				i = j.number(p, i+1) - 1
				continue
			}
			for i+1 < len(p) && literal(p[i+1]) { // the rest of it does not matter
				i++
			}
		}
	}
}

// str reads the rest of the string p starts inside, from p[i]; it returns
// the index after its closing quote, or len(p) if it goes on in the next
// piece.
func (j *jsonScanner) str(p []byte, i int) int {
	d := &j.d
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case d.esc:
			d.esc, d.keyBad = false, true
		case c == '\\':
			d.esc = true
		case c == '"':
			d.inStr = false
			if d.inKey {
				d.inKey = false
				if !d.keyBad {
					d.endKey(d.key[:d.keyLen])
				}
				d.wantKey = false
			}
			return i + 1
		case d.inKey:
			if d.keyLen < len(d.key) {
				d.key[d.keyLen] = c
				d.keyLen++
			} else {
				d.keyBad = true
			}
		default: // inside a value: skip to the next quote or backslash
			i += stringEnd(p[i+1:])
		}
	}
	return len(p)
}

// number reads the digits of a usage count from p[i:]; it returns the index
// of the first byte after them, or len(p) if they may go on in the next
// piece.
func (j *jsonScanner) number(p []byte, i int) int {
	d := &j.d
	for ; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			d.inNum = false
			if d.numField == fieldPrompt {
				d.prompt = d.num
			} else {
				d.completion = d.num
			}
			return i
		}
		if d.num < 1<<40 {
			d.num = d.num*10 + int(c-'0')
		}
	}
	return len(p)
}

// choicesOpened reads what follows `"choices":[` from p[i] on: the first
// byte that is not a space says whether the array is empty. It returns
// that byte's index, unread, or len(p) if the next piece must say.
func (d *docState) choicesOpened(p []byte, i int) int {
	for ; i < len(p); i++ {
		switch p[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case ']':
			d.choices = choicesEmpty
		default:
			d.choices = choicesFull
		}
		d.openChoices = false
		return i
	}
	return len(p)
}

// stringEnd returns the index in b of the first '"' or '\\', the bytes
// that can end a JSON string or change how it reads, or len(b). It tests
// eight bytes at a time: scanning strings byte by byte was a third of the
// time a stream's events took to measure (issue 12).
func stringEnd(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		if m := zeroBytes(v^quotes) | zeroBytes(v^backslashes); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] == '"' || b[i] == '\\' {
			return i
		}
	}
	return len(b)
}

const (
	ones        = 0x0101010101010101
	quotes      = '"' * ones
	backslashes = '\\' * ones
)

// zeroBytes has the high bit of the first zero byte of v set (and perhaps
// of later bytes, never of earlier ones), or is 0 when v has no zero byte.
func zeroBytes(v uint64) uint64 { return (v - ones) &^ v & (0x80 * ones) }

// literal reports whether c can continue a number or a literal.
func literal(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '.' || c == '-' || c == '+' || c == 'E'
}

// endKey notes the member names that matter.
func (d *docState) endKey(k []byte) {
	d.wantKey = false
	switch {
	case d.depth == 1 && string(k) == "choices":
		d.field = fieldChoices
	case d.depth == 1 && string(k) == "usage":
		d.field = fieldUsage
	case d.depth == 2 && d.inUsage && (string(k) == "prompt_tokens" || string(k) == "input_tokens"):
		d.field = fieldPrompt // input_tokens: the Responses API's name
	case d.depth == 2 && d.inUsage && (string(k) == "completion_tokens" || string(k) == "output_tokens"):
		d.field = fieldCompletion
	case string(k) == "role":
		d.role = true
	}
}

// value sees the first byte of a value, before it opens a container.
func (d *docState) value(c byte) {
	f := d.field
	d.field = fieldNone
	switch f {
	case fieldChoices:
		if c == '[' {
			d.openChoices = true
		} else {
			d.choices = choicesFull
		}
	case fieldUsage:
		if c == '{' {
			d.inUsage = true
		} else {
			d.usageOther = true
		}
	case fieldPrompt, fieldCompletion:
		if c >= '0' && c <= '9' {
			d.inNum, d.numField, d.num = true, f, int(c-'0')
		}
	}
}

func (d *docState) push(array bool) {
	d.depth++
	if d.depth <= 64 {
		bit := uint64(1) << (d.depth - 1)
		if array {
			d.arrays |= bit
		} else {
			d.arrays &^= bit
		}
	}
}

// inObject reports whether the innermost container is an object (unknown,
// so false, below 64 levels).
func (d *docState) inObject() bool {
	return d.depth >= 1 && d.depth <= 64 && d.arrays&(1<<(d.depth-1)) == 0
}
