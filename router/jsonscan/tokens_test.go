package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestApproxTokens(t *testing.T) {
	ids := make([]int, 2242)
	for i := range ids {
		ids[i] = 10000 + i
	}
	idsJSON, _ := json.Marshal(ids)
	tests := []struct {
		name string
		v    string
		want int
	}{
		{"token ids are counted exactly", string(idsJSON), 2242},
		{"several prompts of token ids", `[[1,2,3],[4, 5]]`, 5},
		{"a string by four bytes, rounded up", `"` + strings.Repeat("x", 4001) + `"`, 1001},
		{"escapes count as their bytes", `"a\"b"`, 1},
		{"empty string, one as a prompt costs its special token", `""`, 1},
		{"a list of empty prompts", `["","",""]`, 3},
		{"a chat message: content plus about four framing tokens", `[{"role":"user","content":"` + strings.Repeat("y", 400) + `"}]`, 100 + 4},
		{"negative and fractional numbers", `[-1, 2.5e3]`, 2},
		{"literals count nothing", `[true,false,null]`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ApproxTokens([]byte(tt.v)))
		})
	}
}

func FuzzApproxTokens(f *testing.F) {
	for _, s := range []string{`[1,2]`, `"abc"`, `[{"a":"b\\\"c"}]`, `-0.5e+7`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) {
			return
		}
		n := ApproxTokens(v)
		// A data URL's image may count MaxImageTokens in a short string.
		if most := len(v) + len(v)/minMediaString*MaxImageTokens; n < 0 || n > most {
			t.Fatalf("ApproxTokens(%q) = %d, outside 0..%d", v, n, most)
		}
	})
}

func BenchmarkApproxTokens200KB(b *testing.B) {
	text := []byte(`[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 200_000/12) + `"}]`)
	ids := make([]int, 36000) // what deploy/memory.sh sends: 36,000 token ids, about 200 KB
	for i := range ids {
		ids[i] = 1000 + i*7919%120000
	}
	idsJSON, _ := json.Marshal(ids)
	for _, tt := range []struct {
		name string
		v    []byte
	}{{"text", text}, {"token_ids", idsJSON}} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.v)))
			for b.Loop() {
				ApproxTokens(tt.v)
			}
		})
	}
}
