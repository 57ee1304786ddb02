package measure

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// topLevelKeys returns the names of a JSON object's members, in order.
func topLevelKeys(doc []byte) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return keys, true
}

var digits = regexp.MustCompile(`^[0-9]{1,12}$`)

// FuzzJSONScan checks the scanner against encoding/json on valid objects:
// the usage it reads, and whether it takes the document for a usage chunk.
// Escaped member names (\u) are not recognised by design, and duplicate
// top-level names make "the" usage ambiguous, so both are left out.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		`{"usage":{"prompt_tokens":12,"completion_tokens_details":{"reasoning_tokens":0},"completion_tokens":5},"choices":[ ]}`,
		`{"choices":[{"delta":{"content":"\"choices\":[],\"usage\":{\"prompt_tokens\":9}"}}],"usage":null}`,
		`{"a":[{"usage":{"prompt_tokens":1}}],"choices":[[]],"usage":{"prompt_tokens":0}}`,
		`{"choices":{},"usage":{"completion_tokens":7,"prompt_tokens_details":{"prompt_tokens":99}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if bytes.Contains(doc, []byte(`\u`)) || !json.Valid(doc) {
			return
		}
		keys, ok := topLevelKeys(doc)
		if !ok {
			return
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				return
			}
			seen[k] = true
		}
		var top map[string]json.RawMessage // case-sensitive, unlike decoding into a struct
		require.NoError(t, json.Unmarshal(doc, &top))
		var usage map[string]json.RawMessage
		if u, ok := top["usage"]; !ok || json.Unmarshal(u, &usage) != nil {
			usage = nil // absent, or not an object
		}
		var j jsonScanner
		for i := 0; i < len(doc); i += 3 { // piecewise
			j.feed(doc[i:min(i+3, len(doc))])
		}
		require.Equal(t, usage != nil, j.usage, "usage seen in %s", doc)
		number := func(k string) (int, bool) {
			v, ok := usage[k]
			if !ok {
				return 0, true
			}
			if !digits.Match(v) {
				return 0, false
			}
			var n int
			require.NoError(t, json.Unmarshal(v, &n))
			return n, true
		}
		if p, ok := number("prompt_tokens"); ok {
			require.Equal(t, p, j.prompt, "prompt_tokens of %s", doc)
		}
		if c, ok := number("completion_tokens"); ok {
			require.Equal(t, c, j.completion, "completion_tokens of %s", doc)
		}
		var choices []json.RawMessage
		emptyChoices := json.Unmarshal(top["choices"], &choices) == nil && choices != nil && len(choices) == 0
		require.Equal(t, emptyChoices && usage != nil, j.d.usageChunk(), "usage chunk: %s", doc)
		require.False(t, j.d.plain() && j.d.usageChunk())
	})
}

// FuzzStringEnd checks the eight-bytes-at-a-time search against a byte
// loop.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{"", `"`, `\`, "abcdefgh", `abcdefg"`, `abcdefgh\`, "\x01\x00\"", `a"b\c`, "0123456789abcdef\x22", "\x21\x23\x5b\x5d\xa2\xdc"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := len(b)
		for i, c := range b {
			if c == '"' || c == '\\' {
				want = i
				break
			}
		}
		if got := stringEnd(b); got != want {
			t.Fatalf("stringEnd(%q) = %d, want %d", b, got, want)
		}
	})
}
