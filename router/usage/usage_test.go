package usage

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAskUsage(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string
		injected bool
	}{
		{"adds the field", `{"model":"m","stream":true}`,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true},
		{"after the last member, keeping blanks", "{\n  \"model\": \"m\" ,\n  \"stream\": true\n}\n",
			"{\n  \"model\": \"m\" ,\n  \"stream\": true,\"stream_options\":{\"include_usage\":true}\n}\n", true},
		{"empty object", `{}`, `{"stream_options":{"include_usage":true}}`, true},
		{"empty object with blanks", " { \t } ", " { \t \"stream_options\":{\"include_usage\":true}} ", true},
		{"last member is an object", `{"messages":[{"role":"user","content":"}"}]}`,
			`{"messages":[{"role":"user","content":"}"}],"stream_options":{"include_usage":true}}`, true},
		{"null options", `{"stream_options":null,"stream":true}`,
			`{"stream_options":{"include_usage":true},"stream":true}`, true},
		{"options not an object", `{"stream_options":"x"}`, `{"stream_options":{"include_usage":true}}`, true},
		{"empty options", `{"stream_options":{ },"model":"m"}`,
			`{"stream_options":{ "include_usage":true},"model":"m"}`, true},
		{"options without include_usage", `{"stream_options":{"continuous_usage_stats":true}}`,
			`{"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`, true},
		{"include_usage false", `{"stream_options":{"include_usage": false ,"x":1}}`,
			`{"stream_options":{"include_usage": true ,"x":1}}`, true},
		{"include_usage null", `{"stream_options":{"include_usage":null}}`,
			`{"stream_options":{"include_usage":true}}`, true},
		{"already true", `{"stream_options":{"include_usage":true},"stream":true}`,
			`{"stream_options":{"include_usage":true},"stream":true}`, false},
		{"the last duplicate is edited", `{"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`,
			`{"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`, true},
		{"the last duplicate already asks", `{"stream_options":null,"stream_options":{"include_usage":true}}`,
			`{"stream_options":null,"stream_options":{"include_usage":true}}`, false},
		{"escaped key", `{"stream\u005foptions":{"include_usage":false}}`,
			`{"stream\u005foptions":{"include_usage":true}}`, true},
		{"key inside a string is not a key", `{"content":"\"stream_options\":{\"include_usage\":true}"}`,
			`{"content":"\"stream_options\":{\"include_usage\":true}","stream_options":{"include_usage":true}}`, true},
		{"nested stream_options is not the top-level one", `{"extra":{"stream_options":{"include_usage":true}}}`,
			`{"extra":{"stream_options":{"include_usage":true}},"stream_options":{"include_usage":true}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			out, injected, err := AskUsage(in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(out))
			assert.Equal(t, tt.injected, injected)
			assert.Equal(t, tt.in, string(in), "the input is not modified")
			assert.True(t, json.Valid(out))
		})
	}
}

func TestAskUsageRejectsWhatIsNotAnObject(t *testing.T) {
	for _, in := range []string{``, `  `, `[]`, `"x"`, `null`, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a" 1}`,
		`{"a":1}x`, `{"a":"}`, `{"a":[1}`, `{"a":{"b":1}`, `{"stream_options":{"include_usage":}}`, `{1:2}`} {
		out, injected, err := AskUsage([]byte(in))
		require.ErrorIs(t, err, ErrNotObject, "%q", in)
		assert.Nil(t, out)
		assert.False(t, injected)
	}
}

// FuzzAskUsage checks that a valid JSON object comes out valid, asking for
// usage, with every other top-level member and every other stream option as
// they were.
func FuzzAskUsage(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"stream_options":null}`, `{"stream_options":{}}`, `{"stream_options":{"include_usage":false}}`,
		`{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{"stream_options":[1,{"a":"]"}]}`, ` {"a":"\"}\\", "b" : [ {} , [] ] } `,
		`{"stream_options":{"include_usage":true},"stream_options":1}`, `{"a":{"stream_options":null}}`,
		`{"stream\u005foptions":{"include\u005fusage":false}}`, "{\"a\":1e5,\"b\":-0.5,\"c\":true,\"d\":null}\n",
		"null", " null ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, injected, err := AskUsage(in)
		require.Equal(t, orig, in, "the input is not modified")
		var before map[string]any
		if !json.Valid(in) || json.Unmarshal(in, &before) != nil || before == nil {
			return // only a valid object (not null) has a promise; not panicking is checked already
		}
		require.NoError(t, err)
		require.True(t, json.Valid(out), "invalid output %q from %q", out, in)
		var after map[string]any
		require.NoError(t, json.Unmarshal(out, &after))

		opts, ok := after["stream_options"].(map[string]any)
		require.True(t, ok, "stream_options is an object in %q", out)
		assert.Equal(t, true, opts["include_usage"], "%q", out)
		wasOpts, _ := before["stream_options"].(map[string]any)
		assert.Equal(t, wasOpts["include_usage"] != true, injected)
		if !injected {
			assert.Equal(t, in, out)
		}
		for k, v := range wasOpts {
			if k != "include_usage" {
				assert.Equal(t, v, opts[k], "stream option %q kept", k)
			}
		}
		delete(before, "stream_options")
		delete(after, "stream_options")
		assert.Equal(t, before, after, "the other members are unchanged")
	})
}

func BenchmarkAskUsage(b *testing.B) {
	body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"` +
		string(bytes.Repeat([]byte("You are a helpful assistant. "), 100)) + `"},{"role":"user","content":"Hello \"there\""}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := AskUsage(body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSetModel(t *testing.T) {
	out, err := SetModel([]byte(`{"model":"a","messages":[{"content":"model"}],"n":1}`), "fallback/b")
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"fallback/b","messages":[{"content":"model"}],"n":1}`, string(out))
	out, err = SetModel([]byte(` { "x" : 1 } `), "b")
	require.NoError(t, err)
	assert.JSONEq(t, `{"x":1,"model":"b"}`, string(out))
	_, err = SetModel([]byte(`[1]`), "b")
	assert.ErrorIs(t, err, ErrNotObject)
}
