package jsonscan

import "bytes"

// SkipSpace returns the index of the first non-blank byte at or after b[i].
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string that starts at b[i], or -1.
func SkipString(b []byte, i int) int {
	for i++; i < len(b); {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		e := bytes.IndexByte(b[i:i+q], '\\')
		if e < 0 {
			return i + q + 1
		}
		i += e + 2 // the escaped byte cannot end the string
	}
	return -1
}

// SkipValue returns the index after the value that starts at b[i], or -1.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = SkipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i // a number or a literal
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1 // a value inside an object cannot end the body
}
