package batch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzValidate: any input either fails with errors that each name a line
// (or the file), or yields an index whose every span is a line that
// decodes to a request with a custom_id, the endpoint and a model.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":3}}` + "\n"))
	f.Add([]byte("\n\n{\"custom_id\":\"a\"}\r\n[]\n"))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n" +
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":"x"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, errs := validate(bytes.NewReader(in), "/v1/chat/completions", 1000, 1<<20, 0, 16)
		if len(errs) > 0 {
			for _, e := range errs {
				if e.Code == "" || e.Message == "" {
					t.Fatalf("an error without code or message: %+v", e)
				}
			}
			return
		}
		if len(c.index) == 0 {
			t.Fatal("valid with no requests")
		}
		for _, sp := range c.index {
			raw := in[sp.off : sp.off+int64(sp.n)]
			var l inputLine
			if err := json.Unmarshal(raw, &l); err != nil || l.CustomID == nil || l.URL != "/v1/chat/completions" {
				t.Fatalf("span %+v is not a valid line: %q", sp, raw)
			}
			if _, err := flexBody(l.Body); err != nil {
				t.Fatalf("a valid body that cannot be sent: %q", l.Body)
			}
		}
	})
}

// TestFlexBodyGrowsByItsTierOnly: the body a line is sent with keeps <, >
// and & as they are (json.Marshal made each six bytes) and grows by its
// service_tier at most.
func TestFlexBodyGrowsByItsTierOnly(t *testing.T) {
	in := []byte(`{"model":"m", "messages":[{"role":"user","content":"` + strings.Repeat("<&>", 1000) + `"}],"stream":true,"stream_options":{"include_usage":true}}`)
	out, err := flexBody(in)
	require.NoError(t, err)
	assert.Contains(t, string(out), strings.Repeat("<&>", 1000))
	assert.Contains(t, string(out), `"service_tier":"flex"`)
	assert.Contains(t, string(out), `"stream":false`)
	assert.NotContains(t, string(out), "stream_options")
	assert.LessOrEqual(t, len(out), len(in)+flexGrowth)
}

// TestLinesAreMeasuredAsSent: a body whose member names grow when
// re-encoded (U+2028 is escaped, six bytes for three) is measured as it
// will be sent: it passed validation under max_body_bytes and failed 413
// on every run.
func TestLinesAreMeasuredAsSent(t *testing.T) {
	body := `{"model":"m","` + strings.Repeat("\u2028", 1000) + `":1,"messages":[]}`
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + body + "}\n"
	_, errs := validate(strings.NewReader(line), "/v1/chat/completions", 10, 1<<20, len(body)+flexGrowth+100, 16)
	require.Len(t, errs, 1)
	assert.Equal(t, "request_too_large", errs[0].Code)
	assert.Contains(t, errs[0].Message, "as sent")
}

// TestQueuedTokensCountWhatRuns: a line's estimate is the router's: a
// completion's prompt list gets its choices per prompt, best_of counts,
// and the route's member is the prompt (a decoy "messages" beside it hid
// it).
func TestQueuedTokensCountWhatRuns(t *testing.T) {
	for _, tt := range []struct {
		body  string
		least int64
	}{
		{`{"model":"m","max_tokens":100,"prompt":["a","b","c","d","e","f","g","h","i","j"]}`, 1000},
		{`{"model":"m","max_tokens":100,"best_of":10,"prompt":"a"}`, 1000},
		{`{"model":"m","max_tokens":1,"messages":[],"prompt":"` + strings.Repeat("x", 4000) + `"}`, 1000},
	} {
		line := `{"custom_id":"a","method":"POST","url":"/v1/completions","body":` + tt.body + "}\n"
		c, errs := validate(strings.NewReader(line), "/v1/completions", 10, 1<<20, 0, 16)
		require.Empty(t, errs, tt.body)
		assert.GreaterOrEqual(t, c.tokens, tt.least, "%.60s", tt.body)
	}
}
