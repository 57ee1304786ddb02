package measure

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzEvents are the events FuzzStrip builds streams from, with what a
// stripping Writer must make of them.
var fuzzEvents = []struct {
	lines []string // the event's lines, without line endings
	usage bool     // the usage chunk: stripped
	token bool     // a token-carrying event: counted as relayed
}{
	{lines: []string{`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`}},
	{lines: []string{`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}`}, token: true},
	{lines: []string{`data:{"choices":[{"delta":{"content":"\"choices\":[],\"usage\":{}"}}],"usage":null}`}, token: true},
	{lines: []string{`data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`}, usage: true},
	{lines: []string{`data: {"usage": {"completion_tokens":2,"prompt_tokens":3} , "choices": [ ] }`}, usage: true},
	{lines: []string{`id: 7`, `data: {"choices":[],`, `data: "usage":{"prompt_tokens":3,"completion_tokens":2}}`}, usage: true},
	{lines: []string{`data: {"choices":[],"prompt_filter_results":[]}`}},
	{lines: []string{`: keep-alive`}},
	{lines: []string{`event: ping`, `data: {}`}, token: true},
	{lines: []string{`data: [DONE]`}},
}

// FuzzStrip builds streams of the events above, with LF, CRLF or CR line
// endings, stray blank lines between events, and Writes cut anywhere, and
// checks that the client gets every byte but the usage chunks.
func FuzzStrip(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 3, 9}, []byte{5, 200, 3})
	f.Add([]byte{1, 0, 1, 2, 4, 6, 7, 8, 9}, []byte{1, 1, 1, 1, 1})
	f.Add([]byte{2, 5, 1, 0x83, 9}, []byte{255, 17})
	f.Fuzz(func(t *testing.T, plan, cuts []byte) {
		if len(plan) == 0 || len(plan) > 64 {
			return
		}
		eol := []string{"\n", "\r\n", "\r"}[int(plan[0])%3]
		var in, want strings.Builder
		tokens := 0
		for _, b := range plan[1:] {
			ev := fuzzEvents[int(b&0x7f)%len(fuzzEvents)]
			var s strings.Builder
			for _, l := range ev.lines {
				s.WriteString(l + eol)
			}
			s.WriteString(eol)
			if b&0x80 != 0 {
				s.WriteString(eol) // a stray blank line after the event
			}
			in.WriteString(s.String())
			if ev.usage {
				if b&0x80 != 0 {
					want.WriteString(eol)
				}
				continue
			}
			want.WriteString(s.String())
			if ev.token {
				tokens++
			}
		}
		stream := in.String()
		var pieces []string
		for _, c := range cuts {
			n := min(int(c), len(stream))
			pieces, stream = append(pieces, stream[:n]), stream[n:]
		}
		pieces = append(pieces, stream)
		got, w := relay(t, pieces)
		require.Equal(t, want.String(), got)
		require.Equal(t, tokens, w.Result().Relayed)
	})
}
