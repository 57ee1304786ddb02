package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorBodyIsOpenAIShaped(t *testing.T) {
	type fields struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	tests := []struct {
		name   string
		status int
		raw    string
		want   fields
	}{
		{"vLLM", 400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`,
			fields{Message: "max_tokens is too large", Type: "invalid_request_error"}},
		{"TGI", 422, `{"error":"Input validation error: inputs must have less than 4096 tokens","error_type":"validation"}`,
			fields{Message: "Input validation error: inputs must have less than 4096 tokens", Type: "invalid_request_error"}},
		{"an OpenAI type kept", 404, `{"object":"error","message":"no such model","type":"not_found_error","param":"model","code":"model_not_found"}`,
			fields{Message: "no such model", Type: "not_found_error", Param: ptr("model"), Code: ptr("model_not_found")}},
		{"4xx text", 400, "Bad request: prompt too long\n", fields{Message: "Bad request: prompt too long", Type: "invalid_request_error"}},
		{"5xx text hidden", 500, "Internal Server Error: CUDA OOM at node gpu-17", fields{Message: "The backend answered 500 Internal Server Error.", Type: "server_error"}},
		// Any shape's 5xx message (all were relayed until 2026-12-02).
		{"vLLM 5xx message hidden", 500, `{"object":"error","message":"vllm internal secret=sk-backend-SECRET","type":"InternalServerError","code":500}`,
			fields{Message: "The backend answered 500 Internal Server Error.", Type: "server_error"}},
		{"a 5xx code that is not a code hidden too", 500, `{"error":{"message":"m","type":"server_error","code":"SECRET in code postgres://u:p@h"}}`,
			fields{Message: "The backend answered 500 Internal Server Error.", Type: "server_error"}},
		{"no reason phrase", 599, "", fields{Message: "The backend answered 599.", Type: "server_error"}},
		{"OpenAI-shaped 5xx message hidden, its type and code kept", 503, `{"error":{"message":"connect to postgres://admin:s3cr3t@10.0.0.5/db failed","type":"server_error","param":null,"code":"overloaded"}}`,
			fields{Message: "The backend answered 503 Service Unavailable.", Type: "server_error", Code: ptr("overloaded")}},
		{"empty", 503, "", fields{Message: "The backend answered 503 Service Unavailable.", Type: "server_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct{ Error fields }
			require.NoError(t, json.Unmarshal(errorBody(tt.status, []byte(tt.raw), true), &got))
			assert.Equal(t, tt.want, got.Error)
		})
	}
	assert.Nil(t, errorBody(429, []byte(`{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`), true),
		"OpenAI's shape passes as it is")
}

func ptr(s string) *string { return &s }

// A backend's plain-text 500 reaches the client as OpenAI's JSON, without
// the backend's text.
func TestForwardNormalizesBackendErrors(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "Internal Server Error: CUDA OOM at node gpu-17")
	}))
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{})})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	require.NoError(t, p.Forward(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), Attempt{Target: target, Body: []byte(`{}`)}))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.NotContains(t, rec.Body.String(), "gpu-17")
	assert.JSONEq(t, `{"error":{"message":"The backend answered 500 Internal Server Error.","type":"server_error","param":null,"code":null}}`, rec.Body.String())
}
