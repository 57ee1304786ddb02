package router_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// TestResponsesAPIIsChargedItsUsage: the official client's Responses
// calls, whole and streamed, through Sluice to a gpuworker: the tenant is
// charged the worker's own token counts (input_tokens and output_tokens,
// the streamed ones from response.completed), and the answer names the
// class that served it.
func TestResponsesAPIIsChargedItsUsage(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro",
		Limits: quota.Limits{InputTokensPerMinute: 100000, InputBurst: 100000, OutputTokensPerMinute: 100000, OutputBurst: 100000}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.keyed(t, "sk-acme", 0)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: model, Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(24),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello to the fleet.")}}

	res, err := c.Responses.New(ctx, params)
	require.NoError(t, err)
	require.NotEmpty(t, res.OutputText())
	assert.Positive(t, res.Usage.OutputTokens)

	stream := c.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	var usage responses.ResponseUsage
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			usage = ev.Response.Usage
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, res.OutputText(), text.String())
	assert.Equal(t, res.Usage.OutputTokens, usage.OutputTokens, "the stream's usage reached the client")

	l := w.Load()
	page := scrape(t, s)
	assert.Contains(t, page, `sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"} `+strconv.FormatInt(l.GenerationTokens, 10)+"\n",
		"charged the worker's own output count, whole and streamed")
	assert.Contains(t, page, `sluice_tenant_tokens_total{kind="input",tenant="acme",tier="pro"} `+strconv.FormatInt(l.PromptTokens, 10)+"\n",
		"and its input count")
	assert.Contains(t, page, `sluice_http_requests_total{class="default",code="200",model="`+model+`",route="/v1/responses",tier="pro"} 2`)

	params.ServiceTier = responses.ResponseNewParamsServiceTierFlex
	res, err = c.Responses.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, responses.ResponseServiceTierFlex, res.ServiceTier, "the answer names the class that served it")
}

// TestAResponseStreamsFirstTokenIsItsFirstDelta: a Responses stream opens
// before its prompt is prefilled (vLLM sends response.created and
// response.in_progress at once), so the first token Sluice times, for
// routing and admission, is the first delta event, not the first byte.
// The usage charged is the one response.completed reports.
func TestAResponseStreamsFirstTokenIsItsFirstDelta(t *testing.T) {
	const prefill = 150 * time.Millisecond
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		event := func(kind, data string) {
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data)
			_ = rc.Flush()
		}
		open := `{"id":"resp_1","object":"response","status":"in_progress","model":"` + model + `","output":[],"usage":null}`
		event("response.created", `{"type":"response.created","sequence_number":0,"response":`+open+`}`)
		event("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":`+open+`}`)
		time.Sleep(prefill) // the prompt's prefill, after the stream opened
		for i, d := range []string{"Hel", "lo", "!"} {
			event("response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q}`, i+2, d))
		}
		event("response.completed", `{"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"completed","model":"`+model+
			`","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello!","annotations":[]}]}],`+
			`"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":18}}}`)
	}))
	t.Cleanup(backend.Close)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro",
		Limits: quota.Limits{OutputTokensPerMinute: 100000, OutputBurst: 100000}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{backend.URL}})
	c := s.keyed(t, "sk-acme", 0)
	stream := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi")}})
	var text strings.Builder
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "Hello!", text.String())

	page := scrape(t, s)
	assert.Contains(t, page, `sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"} 7`+"\n", "response.completed's usage")
	assert.Contains(t, page, `sluice_tenant_tokens_total{kind="input",tenant="acme",tier="pro"} 11`+"\n")
	assert.GreaterOrEqual(t, s.endpoints[backend.URL].TTFT(), prefill,
		"timed to the first delta: the events before it came at once")
}

// TestResponsesRequestsAreChecked: a response's input is a string or an
// array, and max_output_tokens is a positive integer sent once; refused
// here, in OpenAI's words, before any backend.
func TestResponsesRequestsAreChecked(t *testing.T) {
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{deadURL(t)}})
	for _, tt := range []struct{ body, param, code string }{
		{`{"model":"` + model + `","input":{"role":"user"}}`, "input", "invalid_type"},
		{`{"model":"` + model + `","input":"hi","max_output_tokens":0}`, "max_output_tokens", "integer_below_min_value"},
		{`{"model":"` + model + `","input":"hi","max_output_tokens":5,"max_output_tokens":50000}`, "max_output_tokens", "invalid_value"},
		// Answered at once and made after: its limits and slot would end
		// with the answer, its usage never seen.
		{`{"model":"` + model + `","input":"hi","background":true}`, "background", "unsupported_value"},
		{`{"model":"` + model + `","input":"hi","previous_response_id":7}`, "previous_response_id", "invalid_type"},
	} {
		res, err := http.Post(s.srv.URL+"/v1/responses", "application/json", strings.NewReader(tt.body))
		require.NoError(t, err)
		e := decodeError(t, res)
		res.Body.Close()
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, tt.body)
		assert.Equal(t, tt.param, e.Param, tt.body)
		assert.Equal(t, tt.code, e.Code, tt.body)
	}
}
