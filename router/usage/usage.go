package usage

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

// ErrNotObject is returned by AskUsage for a body that is not a JSON object.
var ErrNotObject = errors.New("usage: request body is not a JSON object")

// AskUsage returns body edited to ask for "stream_options":{"include_usage":true},
// so that a streamed chat or completion answer ends with a chunk carrying
// its usage. injected reports whether the client had not asked for usage
// itself, in which case the router must strip that chunk from what the
// client sees.
//
// Where the body already asks for usage, out is body itself (injected is
// false); otherwise out is a new slice and body is not modified. A
// stream_options that is null, or not an object at all, is replaced; an
// include_usage that is absent is added and one that is not true is set to
// true. Of duplicate keys the last is edited, as decoders keep the last.
//
// AskUsage checks the structure it walks but does not validate the values it
// skips: body must be JSON the caller has already decoded once (the router's
// parse has). Given valid JSON it never returns invalid JSON; given a body
// that is not an object it returns ErrNotObject.
func AskUsage(body []byte) (out []byte, injected bool, err error) {
	top, err := scanObject(body, jsonscan.SkipSpace(body, 0), "stream_options")
	if err != nil {
		return nil, false, err
	}
	if jsonscan.SkipSpace(body, top.close+1) != len(body) {
		return nil, false, ErrNotObject
	}
	if top.value < 0 {
		return top.insert(body, `"stream_options":{"include_usage":true}`), true, nil
	}
	if body[top.value] != '{' {
		return splice(body, top.value, top.valueEnd, "", `{"include_usage":true}`), true, nil
	}
	opts, err := scanObject(body, top.value, "include_usage")
	if err != nil {
		return nil, false, err
	}
	if opts.value < 0 {
		return opts.insert(body, `"include_usage":true`), true, nil
	}
	if string(body[opts.value:opts.valueEnd]) == "true" {
		return body, false, nil
	}
	return splice(body, opts.value, opts.valueEnd, "", "true"), true, nil
}

// SetModel returns a copy of body whose top-level "model" is name (a
// request falling back to another model's pool).
func SetModel(body []byte, name string) ([]byte, error) {
	v, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	return setMember(body, "model", string(v))
}

// SetMaxTokens returns a copy of body whose top-level member key (the
// output cap: "max_tokens", or the Responses API's "max_output_tokens") is
// n, added, or replacing a null.
func SetMaxTokens(body []byte, key string, n int) ([]byte, error) {
	return setMember(body, key, strconv.Itoa(n))
}

// setMember returns a copy of body whose top-level member key has the
// JSON value raw: added, or replacing the one there.
func setMember(body []byte, key, raw string) ([]byte, error) {
	top, err := scanObject(body, jsonscan.SkipSpace(body, 0), key)
	if err != nil {
		return nil, err
	}
	if top.value < 0 {
		return top.insert(body, `"`+key+`":`+raw), nil
	}
	return splice(body, top.value, top.valueEnd, "", raw), nil
}

// object locates the parts of a JSON object that an edit needs.
type object struct {
	value, valueEnd int // the value of the last member with the key sought, or -1
	lastEnd         int // the end of the last member's value, -1 for an empty object
	close           int // the index of the closing brace
}

// insert returns a copy of body with member added as the object's last.
func (o object) insert(body []byte, member string) []byte {
	if o.lastEnd < 0 {
		return splice(body, o.close, o.close, "", member)
	}
	return splice(body, o.lastEnd, o.lastEnd, ",", member)
}

// splice returns a copy of b with b[from:to] replaced by sep+s.
func splice(b []byte, from, to int, sep, s string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(sep)+len(s))
	out = append(out, b[:from]...)
	out = append(out, sep...)
	out = append(out, s...)
	return append(out, b[to:]...)
}

// scanObject walks the members of the object that starts at b[i], noting
// the last one named key.
func scanObject(b []byte, i int, key string) (object, error) {
	o := object{value: -1, valueEnd: -1, lastEnd: -1}
	if i >= len(b) || b[i] != '{' {
		return o, ErrNotObject
	}
	i = jsonscan.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		o.close = i
		return o, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return o, ErrNotObject
		}
		k := i
		i = jsonscan.SkipString(b, i)
		if i < 0 {
			return o, ErrNotObject
		}
		name := b[k:i]
		i = jsonscan.SkipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return o, ErrNotObject
		}
		v := jsonscan.SkipSpace(b, i+1)
		i = jsonscan.SkipValue(b, v)
		if i < 0 {
			return o, ErrNotObject
		}
		if keyIs(name, key) {
			o.value, o.valueEnd = v, i
		}
		o.lastEnd = i
		i = jsonscan.SkipSpace(b, i)
		if i >= len(b) {
			return o, ErrNotObject
		}
		switch b[i] {
		case ',':
			i = jsonscan.SkipSpace(b, i+1)
		case '}':
			o.close = i
			return o, nil
		default:
			return o, ErrNotObject
		}
	}
}

// keyIs reports whether the quoted JSON string q is key.
func keyIs(q []byte, key string) bool {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1:len(q)-1]) == key
	}
	var s string // an escaped key, such as "stream\u005foptions": rare, so decode it
	return json.Unmarshal(q, &s) == nil && s == key
}
