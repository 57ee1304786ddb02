package apierror_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/router/apierror"
)

func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "2")
	apierror.Write(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "", "Expected a value >= 1")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, "2", w.Header().Get("Retry-After"), "headers set before go out with it")
	assert.JSONEq(t, `{"error":{"message":"Expected a value >= 1","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, w.Body.String())
	assert.Contains(t, w.Body.String(), ">= 1", "no HTML escapes")

	w = httptest.NewRecorder()
	apierror.Write(w, http.StatusBadRequest, "invalid_request_error", "", "n", "bad n")
	assert.JSONEq(t, `{"error":{"message":"bad n","type":"invalid_request_error","param":"n","code":null}}`, w.Body.String())
}
