package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

// maxDepth is encoding/json's nesting limit: a text nested deeper is not
// valid to json.Valid, so it is not to Valid either.
const maxDepth = 10000

// Valid reports whether b is one valid JSON text, exactly as json.Valid
// does (FuzzValid holds the two equal): one value between optional blanks,
// strings checked for control bytes and escapes but not for UTF-8, at most
// 10,000 levels of nesting. It allocates nothing and runs several times
// faster than json.Valid, which steps a state machine through a function
// pointer for every byte; on a 200 KB prompt that was most of the
// router's CPU per request (issue 12).
func Valid(b []byte) bool { return scan(b, nil) }

// Object is Valid for a text whose value is an object, walking it in the
// same single pass: it calls fn with each of the object's own members in
// order, with its key as written (between the quotes, escapes not undone)
// and its raw value. It reports whether b is valid JSON whose value is an
// object; fn may have been called for the members before the first invalid
// byte, so a caller acts on what fn saw only when Object returns true.
func Object(b []byte, fn func(key, val []byte)) bool {
	return ObjectTokens(b, func(key, val []byte, _ int) { fn(key, val) })
}

// ObjectTokens is Object, also giving fn each member's ApproxTokens(val),
// counted in the same pass: a prompt of 36,000 token ids took as long to
// count again after the check as the check itself (issue 12).
func ObjectTokens(b []byte, fn func(key, val []byte, tokens int)) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	return scan(b, fn)
}

// scan validates b, calling fn (when not nil) for each member of the
// top-level object with the tokens ApproxTokens counts in its value. It
// walks containers with a counter and a bit stack instead of recursion,
// so a deeply nested text costs no stack growth.
func scan(b []byte, fn func(key, val []byte, tokens int)) bool {
	var arrays [maxDepth/64 + 1]uint64 // bit d-1 set: the container at depth d is an array
	depth, inArray := 0, false         // inArray: the container at depth is an array
	var key []byte                     // the top-level member being read
	val := 0                           // and where its value starts
	// tokens counts as ApproxTokens does: each number one, each string
	// (keys below the top level too) one per BytesPerToken bytes; at
	// valTokens the member's value began.
	tokens, valTokens := 0, 0
	i := SkipSpace(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxDepth {
				return false
			}
			depth++
			inArray = c == '['
			if inArray {
				arrays[(depth-1)/64] |= 1 << ((depth - 1) % 64)
			} else {
				arrays[(depth-1)/64] &^= 1 << ((depth - 1) % 64)
			}
			i = SkipSpace(b, i+1)
			if i < len(b) && (b[i] == ']' && inArray || b[i] == '}' && !inArray) {
				i++
				if depth--; depth > 0 {
					inArray = arrays[(depth-1)/64]&(1<<((depth-1)%64)) != 0
				}
				break // empty: the value is done
			}
			if inArray {
				continue // its first element
			}
			k, v := member(b, i)
			if v < 0 {
				return false
			}
			if depth == 1 {
				key, val, valTokens = b[i+1:k-1], v, tokens
			} else {
				tokens += valueTokens(b[i:k])
			}
			i = v
			continue // its first member's value
		case '"':
			start := i
			if i = stringEnd(b, i); i > 0 {
				tokens += valueTokens(b[start:i])
			}
		case 't':
			i = literal(b, i, "true")
		case 'f':
			i = literal(b, i, "false")
		case 'n':
			i = literal(b, i, "null")
		default:
			tokens++ // a number, or invalid
			if c < '1' || c > '9' {
				i = number(b, i)
				break
			}
			// A positive integer. In an array, integers mostly follow one
			// another (a prompt of token ids): take each ",N" in this
			// tight loop rather than a trip round the main one, which
			// made validating such a prompt take three times as long.
			start := i
			i = digits(b, i+1)
			for inArray && i+1 < len(b) && b[i] == ',' && '1' <= b[i+1] && b[i+1] <= '9' {
				start = i + 1
				i = digits(b, i+2)
				tokens++
			}
			if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
				i = number(b, start) // the last one goes on
			}
		}
		if i < 0 {
			return false
		}
		// A value ended at b[i-1]: read on to the next one, closing the
		// containers that end on the way (each a value that ended too).
		for {
			if depth == 1 && fn != nil {
				fn(key, b[val:i], tokens-valTokens)
			}
			if i < len(b) && b[i] == ',' { // the common case, no blanks
				break
			}
			i = SkipSpace(b, i)
			if depth == 0 {
				return i == len(b) // one value, then only blanks
			}
			if i >= len(b) {
				return false
			}
			if !(b[i] == ']' && inArray || b[i] == '}' && !inArray) {
				break
			}
			i++
			if depth--; depth > 0 {
				inArray = arrays[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			}
		}
		if depth == 0 || b[i] != ',' {
			return false
		}
		i++
		if i < len(b) && b[i] <= ' ' {
			i = SkipSpace(b, i)
		}
		if !inArray {
			k, v := member(b, i)
			if v < 0 {
				return false
			}
			if depth == 1 {
				key, val, valTokens = b[i+1:k-1], v, tokens
			} else {
				tokens += valueTokens(b[i:k])
			}
			i = v
		}
	}
}

// stringTokens is ApproxTokens of a string n bytes long, its quotes
// included.
func stringTokens(n int) int { return max((n-2+BytesPerToken-1)/BytesPerToken, 1) }

// member reads an object member's `"key" :` from b[i] and returns the
// index after the key's closing quote and where the value starts (after
// blanks), or -1 for both.
func member(b []byte, i int) (keyEnd, val int) {
	if i >= len(b) || b[i] != '"' {
		return -1, -1
	}
	keyEnd = stringEnd(b, i)
	if keyEnd < 0 {
		return -1, -1
	}
	i = SkipSpace(b, keyEnd)
	if i >= len(b) || b[i] != ':' {
		return -1, -1
	}
	return keyEnd, SkipSpace(b, i+1)
}

// literal returns the index after word at b[i], or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number returns the index after the number that starts at b[i], or -1:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. What follows it is the
// caller's to check (a delimiter, a blank or the end).
func number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); b[i-1] == '.' {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := digits(b, i)
		if d == i {
			return -1
		}
		i = d
	}
	return i
}

// digits returns the index of the first byte at or after b[i] that is not
// a decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// stringEnd returns the index after the JSON string that starts at b[i] (a
// quote), or -1 if it is not a valid one: it ends at an unescaped quote,
// holds no byte below 0x20, and every escape is one of \" \\ \/ \b \f \n
// \r \t or \u and four hex digits. Bytes from 0x80 up pass unchecked, as in
// json.Valid. It reads eight bytes at a time while none of them is a
// quote, a backslash or a control byte, which is most of a prompt.
func stringEnd(b []byte, i int) int {
	for i++; ; {
		for len(b)-i >= 8 {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i++; i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 || !hex(b[i+1]) || !hex(b[i+2]) || !hex(b[i+3]) || !hex(b[i+4]) {
					return -1
				}
				i += 5
			default:
				return -1
			}
		default:
			i++
		}
	}
}

func hex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special returns a word whose lowest set bit is the high bit of the first
// byte of w (little-endian) that is a quote, a backslash or below 0x20,
// and 0 when there is none. Bits above that one may be set wrongly (a
// borrow carries up), so only the lowest is read. See "Determine if a word
// has a zero byte" and "has a byte less than n" in Sean Anderson's Bit
// Twiddling Hacks.
func special(w uint64) uint64 {
	q := w ^ ('"' * ones)
	s := w ^ ('\\' * ones)
	return ((q-ones)&^q | (s-ones)&^s | (w-0x20*ones)&^w) & highs
}
