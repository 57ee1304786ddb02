package jsonscan_test

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

// validSeeds are texts at the edges of the grammar, each valid or not.
var validSeeds = []string{
	``, ` `, `{}`, `[]`, ` {} `, `{} x`, `{}{}`, `null`, `nul`, `nullx`, `true`, `false`, `tru`, `truee`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e5.`, `-1.2e+30`, `2 `, `1 2`, `0x1`,
	`""`, `"a`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00G9"`, `"\u12"`, `"\x"`, "\"\x01\"", "\"\x7f\"",
	"\"\xff\xfe\"", "\"ab\tc\"", `"12345678\"12345678"`, `"1234567"`,
	`{"a":1}`, `{"a":1,}`, `{"a" : [1, 2 , {"b":null}] }`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`,
	`[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, `[[]`, `[]]`, `{"a":{"b":{}}}}`, `{"a":[}`, "{\r\n\t\"a\"\t:\n1\r}",
	`{"model":"m","messages":[{"role":"user","content":"a \"}]\" b"}],"n":1}`,
	`{"prompt":[1,23,456,-7,8.5e2,0,10.5,"ab"],"x":"abcdefg","m":[{"k":"vv","l":[true,null,3]}],"n":-0.5e-3}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

// ObjectTokens counts each member's value as ApproxTokens does, the top
// level's keys aside.
func TestObjectTokens(t *testing.T) {
	body := `{"model":"llama","prompt":[1000,23,456,-7,8.5e2,0,10.5,"abcde"],"messages":[{"role":"user","content":"` +
		strings.Repeat("x", 401) + `"}],"stream":true,"n":12}`
	got := map[string]int{}
	require.True(t, jsonscan.ObjectTokens([]byte(body), func(k, v []byte, n int) {
		got[string(k)] = n
		assert.Equal(t, jsonscan.ApproxTokens(v), n, "%s", k)
	}))
	assert.Equal(t, map[string]int{"model": 2, "prompt": 7 + 2, "messages": 1 + 1 + 2 + 101, "stream": 0, "n": 1}, got)
}

func TestValid(t *testing.T) {
	for _, s := range validSeeds {
		assert.Equal(t, json.Valid([]byte(s)), jsonscan.Valid([]byte(s)), "%.80q", s)
	}
}

func TestObject(t *testing.T) {
	type kv struct{ Key, Val string }
	tests := []struct {
		name, body string
		ok         bool
		want       []kv
	}{
		{"members in order", ` {"model" : "m", "messages":[{"a":"}"}] ,"n":1.5e3,"x":{"y":[]},"z":null} `, true,
			[]kv{{"model", `"m"`}, {"messages", `[{"a":"}"}]`}, {"n", "1.5e3"}, {"x", `{"y":[]}`}, {"z", "null"}}},
		{"keys as written", `{"a\"b":true,"a":false,"a":1}`, true, []kv{{`a\"b`, "true"}, {"a", "false"}, {"a", "1"}}},
		{"empty", `{}`, true, nil},
		{"not an object", `[{"a":1}]`, false, nil},
		{"invalid after the members", `{"a":1,"b":2}}`, false, []kv{{"a", "1"}, {"b", "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []kv
			ok := jsonscan.Object([]byte(tt.body), func(k, v []byte) { got = append(got, kv{string(k), string(v)}) })
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// FuzzValid holds Valid equal to json.Valid, and Object to json.Valid of
// an object, walking the same members as SkipString and SkipValue find,
// with ObjectTokens counting each one's value as ApproxTokens does.
func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b)
		if got := jsonscan.Valid(b); got != want {
			t.Fatalf("Valid(%.200q) = %v, json.Valid %v", b, got, want)
		}
		var keys, vals []string
		var tokens []int
		ok := jsonscan.ObjectTokens(b, func(k, v []byte, n int) {
			keys, vals, tokens = append(keys, string(k)), append(vals, string(v)), append(tokens, n)
		})
		if okObject := jsonscan.Object(b, func([]byte, []byte) {}); okObject != ok {
			t.Fatalf("Object(%.200q) = %v, ObjectTokens %v", b, okObject, ok)
		}
		isObject := want && b[jsonscan.SkipSpace(b, 0)] == '{'
		if ok != isObject {
			t.Fatalf("Object(%.200q) = %v, want %v", b, ok, isObject)
		}
		if !ok {
			return
		}
		var wantKeys, wantVals []string
		i := jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, 0)+1)
		for i < len(b) && b[i] == '"' {
			k := jsonscan.SkipString(b, i)
			v := jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, k)+1)
			e := jsonscan.SkipValue(b, v)
			if e < 0 { // a scalar at the very end cannot be a member
				t.Fatalf("SkipValue failed in valid %q", b)
			}
			wantKeys, wantVals = append(wantKeys, string(b[i+1:k-1])), append(wantVals, string(b[v:e]))
			i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, e)+1)
		}
		assert.Equal(t, wantKeys, keys)
		assert.Equal(t, wantVals, vals)
		for j, v := range vals {
			if want := jsonscan.ApproxTokens([]byte(v)); tokens[j] != want {
				t.Fatalf("ObjectTokens(%.200q) counted %d tokens in %q, ApproxTokens %d", b, tokens[j], v, want)
			}
		}
	})
}

// tokenIDs returns n token ids between 1000 and 30000, comma-separated,
// as a load generator sends a prompt.
func tokenIDs(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(1000 + r.IntN(29000)))
	}
	return sb.String()
}

func BenchmarkValid(b *testing.B) {
	for _, tt := range []struct{ name, text string }{
		{"tokens", `{"model":"m","prompt":[` + tokenIDs(36000) + `]}`},
		{"chat", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(`You are a careful assistant. Answer \"briefly\".\n`, 4400) + `"}]}`},
	} {
		body := []byte(tt.text)
		b.Run(tt.name+"/jsonscan", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				jsonscan.Valid(body)
			}
		})
		b.Run(tt.name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				json.Valid(body)
			}
		})
	}
}
