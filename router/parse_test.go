package router

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseInference(t *testing.T) {
	tests := []struct {
		name string
		body string
		want parsed
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7,"user":"u1","n":3}`,
			parsed{model: "m", stream: true, maxTokens: 7, choices: 3, user: "u1", promptTokens: 5, messagesKind: '['}},
		{"max_completion_tokens wins", `{"model":"m","max_tokens":7,"max_completion_tokens":9}`, parsed{model: "m", maxTokens: 9, choices: 1, promptTokens: 13}},
		{"no max, token ids counted exactly", `{"model":"m","prompt":[10001,10002,10003]}`, parsed{model: "m", choices: 1, promptTokens: 3, promptKind: '['}},
		{"a text prompt", `{"model":"m","prompt":"12345678"}`, parsed{model: "m", choices: 1, promptTokens: 2, promptKind: '"'}},
		{"embeddings input", `{"model":"m","input":["abcd","efgh"]}`, parsed{model: "m", choices: 1, promptTokens: 2, inputKind: '['}},
		{"best_of is what runs", `{"model":"m","n":2,"best_of":8}`, parsed{model: "m", choices: 8, promptTokens: 7}},
		{"unknown fields pass", `{"model":"m","ignore_eos":true,"logit_bias":{"1":2}}`, parsed{model: "m", choices: 1, promptTokens: 13}},
		{"a stored response continued", `{"model":"m","input":"abcd","previous_response_id":"resp_1"}`,
			parsed{model: "m", choices: 1, promptTokens: 1, inputKind: '"', previousResponse: "resp_1"}},
		{"a response not to store", `{"model":"m","input":"abcd","store":false}`, parsed{model: "m", choices: 1, promptTokens: 1, inputKind: '"', noStore: true}},
		{"stored by default", `{"model":"m","input":"abcd","store":true,"previous_response_id":null}`, parsed{model: "m", choices: 1, promptTokens: 1, inputKind: '"'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, apiErr := parseInference([]byte(tt.body))
			require.Nil(t, apiErr)
			// checkRoute's (TestPromptEstimateIsTheRoutes, TestCompletionsReserveEveryPrompt,
			// TestSessionKeyAndPrefixHashesReachThePicker)
			got.memberTokens, got.memberBytes, got.bodyBytes, got.maxTokensOnly, got.prompt, got.input = [3]int{}, [3]int{}, 0, 0, nil, nil
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestPromptEstimateIsTheRoutes: the prompt estimate is the route's
// member's (token ids exactly), with every other byte of the body at four
// a token: a decoy member of another route, or chat's tools, cannot hide
// a prompt from the limits.
func TestPromptEstimateIsTheRoutes(t *testing.T) {
	text := strings.Repeat("x", 4000)
	ids := strings.TrimSuffix(strings.Repeat("12345,", 1000), ",")
	for _, tt := range []struct {
		path, body  string
		least, most int
	}{
		{"/v1/completions", `{"model":"m","messages":[],"prompt":"` + text + `"}`, 1000, 1020},
		{"/v1/embeddings", `{"model":"m","messages":[],"input":"` + text + `"}`, 1000, 1020},
		{"/v1/completions", `{"model":"m","prompt":[` + ids + `]}`, 1000, 1010}, // ids counted exactly, not their 6,000 bytes
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":"` + text + `"}}]}`, 1000, 1040},
		{"/v1/chat/completions", `{"model":"m","prompt":"` + text + `","messages":[{"role":"user","content":"hi"}]}`, 1000, 1020},
	} {
		p, err := parseInference([]byte(tt.body))
		require.NoError(t, err)
		require.NoError(t, p.checkRoute(tt.path))
		assert.GreaterOrEqual(t, p.promptTokens, tt.least, "%s %.60s", tt.path, tt.body)
		assert.LessOrEqual(t, p.promptTokens, tt.most, "%s %.60s", tt.path, tt.body)
	}
}

// TestCompletionsReserveEveryPrompt: a completion's prompt list gets its
// choices per prompt, and the larger of max_tokens and
// max_completion_tokens counts, on every route: a backend reads one or the
// other (a legacy server max_tokens alone, gpuworker's completions
// max_completion_tokens first: 3,000 generated where the default's 100
// was reserved).
func TestCompletionsReserveEveryPrompt(t *testing.T) {
	for _, tt := range []struct {
		path, body         string
		choices, maxTokens int
	}{
		{"/v1/completions", `{"model":"m","n":2,"max_tokens":5,"prompt":["a","b","c"]}`, 6, 5},
		{"/v1/completions", `{"model":"m","best_of":3,"prompt":[[1,2],[3],[4]]}`, 9, 0},
		{"/v1/completions", `{"model":"m","prompt":[1,2,3]}`, 1, 0},
		{"/v1/completions", `{"model":"m","prompt":"abc"}`, 1, 0},
		{"/v1/completions", `{"model":"m","max_tokens":4000,"max_completion_tokens":1,"prompt":"hi"}`, 1, 4000},
		{"/v1/completions", `{"model":"m","max_completion_tokens":3000,"prompt":"hi"}`, 1, 3000}, // and the tier's default sent as max_tokens

		{"/v1/chat/completions", `{"model":"m","max_tokens":4000,"max_completion_tokens":1,"messages":[]}`, 1, 4000},
		{"/v1/chat/completions", `{"model":"m","max_tokens":1,"max_completion_tokens":4000,"messages":[]}`, 1, 4000},
	} {
		p, err := parseInference([]byte(tt.body))
		require.NoError(t, err)
		require.NoError(t, p.checkRoute(tt.path))
		assert.Equal(t, tt.choices, p.choices, tt.body)
		assert.Equal(t, tt.maxTokens, p.maxTokens, tt.body)
	}
}

func TestCheckRoute(t *testing.T) {
	tests := []struct {
		path, body string
		param      string // "" for accepted
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[]}`, ""},
		{"/v1/chat/completions", `{"model":"m","messages":null}`, "messages"},
		{"/v1/chat/completions", `{"model":"m","prompt":"hi"}`, "messages"},
		{"/v1/chat/completions", `{"model":"m","messages":{"role":"user"}}`, "messages"},
		{"/v1/completions", `{"model":"m","prompt":"hi"}`, ""},
		{"/v1/completions", `{"model":"m","prompt":[[1,2],[3]]}`, ""},
		{"/v1/completions", `{"model":"m","prompt":null,"prompt_embeds":"AAAA"}`, ""},
		{"/v1/completions", `{"model":"m","prompt_embeds":"AAAA"}`, ""},
		{"/v1/completions", `{"model":"m","prompt":true}`, "prompt"},
		{"/v1/embeddings", `{"model":"m","input":"hi"}`, ""},
		{"/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"/v1/embeddings", `{"model":"m","input":12}`, "input"},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.body, func(t *testing.T) {
			p, err := parseInference([]byte(tt.body))
			require.NoError(t, err)
			err = p.checkRoute(tt.path)
			if tt.param == "" {
				assert.NoError(t, err)
				return
			}
			apiErr := errorFor(err)
			assert.Equal(t, 400, apiErr.Status)
			assert.Equal(t, tt.param, apiErr.Param)
		})
	}
}

func TestNumberErrorsReadAsOpenAIs(t *testing.T) {
	tests := []struct{ body, code, msg string }{
		{`{"model":"m","max_tokens":5.5}`, "invalid_type", "Invalid type for 'max_tokens': expected an integer, but got a decimal number instead."},
		{`{"model":"m","n":1e3}`, "invalid_type", "Invalid type for 'n': expected an integer, but got a decimal number instead."},
		{`{"model":"m","max_tokens":9223372036854775808}`, "integer_above_max_value",
			"Invalid 'max_tokens': integer above maximum value. Expected a value <= 9223372036854775807, but got 9223372036854775808 instead."},
		{`{"model":"m","max_completion_tokens":-9223372036854775809}`, "integer_below_min_value",
			"Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= -9223372036854775808, but got -9223372036854775809 instead."},
		{`{"model":"m","max_tokens":"5"}`, "invalid_type", "Invalid type for 'max_tokens': expected an integer, but got a string instead."},
		{`{"model":"m","stream":1.5}`, "invalid_type", "Invalid type for 'stream': expected a boolean, but got a number instead."},
	}
	for _, tt := range tests {
		_, err := parseInference([]byte(tt.body))
		require.Error(t, err, tt.body)
		apiErr := errorFor(err)
		assert.Equal(t, tt.code, apiErr.Code, tt.body)
		assert.Equal(t, tt.msg, apiErr.Message, tt.body)
	}
}

// TestRoutingMembersAreReadOnce: a member routing reads, escaped or sent
// twice, would reach a backend as something else than Sluice checked
// ("m\u0061x_tokens" passed the limits unread and ran as max_tokens);
// such a body is refused, naming the member. Other members are the
// backend's business, escaped or not.
func TestRoutingMembersAreReadOnce(t *testing.T) {
	for _, tt := range []struct{ body, param, msg string }{
		{`{"model":"m","m\u0061x_tokens":2000}`, "max_tokens", `Invalid parameter name 'm\u0061x_tokens': write 'max_tokens' without escapes.`},
		{`{"model":"m","\u006e":8}`, "n", `Invalid parameter name '\u006e': write 'n' without escapes.`},
		{`{"model":"fake","mod\u0065l":"llama"}`, "model", `Invalid parameter name 'mod\u0065l': write 'model' without escapes.`},
		{`{"model":"m","messages":[],"m\u0065ssages":[{"role":"user","content":"long"}]}`, "messages", `Invalid parameter name 'm\u0065ssages': write 'messages' without escapes.`},
		{`{"model":"fake","model":"llama"}`, "model", `Duplicate parameter 'model': send it once.`},
		// Go's encoding/json reads these as the members, case aside.
		{`{"model":"fake","Model":"llama"}`, "model", `Invalid parameter name 'Model': write 'model' exactly as that.`},
		{`{"model":"m","MAX_TOKENS":2000}`, "max_tokens", `Invalid parameter name 'MAX_TOKENS': write 'max_tokens' exactly as that.`},
		{`{"model":"m","ſtream":true}`, "stream", `Invalid parameter name 'ſtream': write 'stream' exactly as that.`},
		{"{\"model\":\"m\",\"\u017ftream\":true}", "stream", "Invalid parameter name '\u017ftream': write 'stream' exactly as that."}, // the raw letter ſ
		{`{"model":"m","max_tokens":1,"max_tokens":2000}`, "max_tokens", `Duplicate parameter 'max_tokens': send it once.`},
		// The stored response a request continues decides where it runs
		// (and whose it must be): another one must not reach the backend.
		{`{"model":"m","input":"hi","previous_response_id":"resp_mine","previous_response_id":"resp_theirs"}`, "previous_response_id",
			`Duplicate parameter 'previous_response_id': send it once.`},
		{`{"model":"m","input":"hi","previous_response_\u0069d":"resp_theirs"}`, "previous_response_id",
			`Invalid parameter name 'previous_response_\u0069d': write 'previous_response_id' without escapes.`},
		{`{"model":"m","input":"hi","st\u006fre":false}`, "store", `Invalid parameter name 'st\u006fre': write 'store' without escapes.`},
		{`{"model":"m","input":"hi","b\u0061ckground":true}`, "background", `Invalid parameter name 'b\u0061ckground': write 'background' without escapes.`},
	} {
		_, err := parseInference([]byte(tt.body))
		require.Error(t, err, tt.body)
		apiErr := errorFor(err)
		assert.Equal(t, 400, apiErr.Status, tt.body)
		assert.Equal(t, "invalid_value", apiErr.Code, tt.body)
		assert.Equal(t, tt.param, apiErr.Param, tt.body)
		assert.Equal(t, tt.msg, apiErr.Message, tt.body)
	}
	for _, body := range []string{
		`{"model":"m","\u00e9t\u00e9":1,"x":1,"x":2}`,                    // not routing members
		`{"model":"m","metadata":{"m\u006fdel":"x","model":"y"}}`,        // nested: not top level
		`{"model":"m","messages":[{"role":"user","c\u006fntent":"hi"}]}`, // the backend's to check
	} {
		_, err := parseInference([]byte(body))
		assert.NoError(t, err, body)
	}
}

func FuzzParseInference(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[]}`, `{"model":""}`, `{"model":1}`, `[]`, `{`, ``, `null`,
		`{"model":"m","max_tokens":-1}`, `{"model":"m","stream":"x"}`, `{"model":"m","stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x\"y", 200) + `"}]}`,
		`{"model":"m","prompt":"a","prompt":[1,2],"messages":null}`, ` {"model" : "m" , "prompt" : 7 } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseInference(body)
		if err != nil {
			apiErr := errorFor(err)
			if apiErr.Status != 400 || apiErr.Message == "" || apiErr.Type != typeInvalidRequest {
				t.Fatalf("bad rejection %+v", apiErr)
			}
			return
		}
		if p.model == "" || p.maxTokens < 0 || p.choices < 1 {
			t.Fatalf("accepted %q as %+v", body, p)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		v := promptValue(body)
		if v != nil && !json.Valid(v) {
			t.Fatalf("prompt value %q of %q is not a JSON value", v, body)
		}
		if len(p.prefix) > prefixMaxChunks || len(p.prefix) != min(len(v)/prefixChunk, prefixMaxChunks) {
			t.Fatalf("%d prefix hashes for a %d-byte prompt", len(p.prefix), len(v))
		}
	})
}

// FuzzDecodeSimple holds decodeSimple to json.Unmarshal: whatever it
// decodes, json.Unmarshal decodes without error to the same value, from
// an empty target and from one a duplicate key filled before.
func FuzzDecodeSimple(f *testing.F) {
	for _, s := range []string{`"m"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", `"é"`, `true`, `false`, `null`, `0`, `-0`, `7`, `-12`,
		`1.5`, `1e3`, `99999999999999999999`, `{"include_usage":true}`, `{"include_usage":false}`, `{"Include_Usage":true}`, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, val []byte) {
		if !json.Valid(val) {
			return
		}
		check := func(fast, slow any) {
			if !decodeSimple(val, fast) {
				return
			}
			require.NoError(t, json.Unmarshal(val, slow), "%q", val)
			require.Equal(t, slow, fast, "%q", val)
		}
		check(new(string), new(string))
		s1, s2 := "before", "before"
		check(&s1, &s2)
		check(new(bool), new(bool))
		check(new(*int), new(*int))
		n1, n2 := 5, 5
		p1, p2 := &n1, &n2
		check(&p1, &p2)
		check(new(*streamOptions), new(*streamOptions))
		o1, o2 := &streamOptions{IncludeUsage: true}, &streamOptions{IncludeUsage: true}
		check(&o1, &o2)
	})
}

func TestPromptValue(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"messages", `{"model":"m","messages":[{"role":"user","content":"a \"}]\" b"}],"n":1}`, `[{"role":"user","content":"a \"}]\" b"}]`},
		{"messages win over prompt", `{"prompt":"p","messages":[]}`, `[]`},
		{"prompt string", ` { "model" : "m" , "prompt" : "once upon" } `, `"once upon"`},
		{"prompt tokens", `{"prompt":[1,2,3]}`, `[1,2,3]`},
		{"nested keys do not count", `{"x":{"messages":[1]},"y":["prompt"],"prompt":null}`, `null`},
		{"last duplicate wins", `{"prompt":"a","prompt":"b"}`, `"b"`},
		{"keys match exactly", `{"Messages":[1]}`, ``},
		{"none", `{"model":"m","input":"x"}`, ``},
		{"not an object", `["messages"]`, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, string(promptValue([]byte(tt.body))))
		})
	}
}

func TestPrefixHashes(t *testing.T) {
	msg := func(content string) []byte {
		b, err := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}}})
		require.NoError(t, err)
		return b
	}
	shared := strings.Repeat("s", 3*prefixChunk)
	a := prefixHashes(msg(shared + strings.Repeat("a", 2*prefixChunk)))
	b := prefixHashes(msg(shared + strings.Repeat("b", 2*prefixChunk)))
	require.Len(t, a, 5)
	require.Len(t, b, 5)
	assert.Equal(t, a[:3], b[:3], "equal prefixes, equal leading hashes")
	for i := 3; i < 5; i++ {
		assert.NotEqual(t, a[i], b[i], "chained: every hash after the first difference differs")
	}
	assert.Nil(t, prefixHashes(msg("short")), "no whole chunk")
	assert.Len(t, prefixHashes(msg(strings.Repeat("x", 100*prefixChunk))), prefixMaxChunks, "capped")

	body := msg(shared)
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { prefixHashes(body) }), "one allocation: the result")
}

func BenchmarkParseInference(b *testing.B) {
	chat := []byte(`{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a careful assistant. ", 150) + `"},{"role":"user","content":"hi"}]}`)
	// deploy/memory.sh's long prompt: 36,000 token ids, about 200 KB.
	ids := []byte(`{"model":"m","stream":true,"max_tokens":4,"prompt":[`)
	for i := range 36000 {
		if i > 0 {
			ids = append(ids, ',')
		}
		ids = strconv.AppendInt(ids, int64(1000+i*7919%120000), 10)
	}
	ids = append(ids, "]}"...)
	for _, tt := range []struct {
		name string
		body []byte
	}{{"chat_4KB", chat}, {"token_ids_200KB", ids}} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, apiErr := parseInference(tt.body); apiErr != nil {
					b.Fatal(apiErr)
				}
			}
		})
	}
}
