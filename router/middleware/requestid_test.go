package middleware

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequestID(t *testing.T) {
	tests := []struct {
		name, in string
		keep     bool
	}{
		{"accepted", "abc-123", true},
		{"max length", strings.Repeat("a", 128), true},
		{"too long", strings.Repeat("a", 129), false},
		{"space", "a b", false},
		{"non-ascii", "héllo", false},
		{"missing", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen string
			h := RequestID(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				seen = RequestIDFrom(r.Context())
				assert.Equal(t, seen, r.Header.Get(RequestIDHeader), "forwarded upstream too")
			}))
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.in != "" {
				req.Header.Set(RequestIDHeader, tt.in)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got := rec.Header().Get(RequestIDHeader)
			assert.Equal(t, seen, got)
			if tt.keep {
				assert.Equal(t, tt.in, got)
			} else {
				assert.Len(t, got, 32)
			}
		})
	}
}

func TestRecovererWritesOpenAIError(t *testing.T) {
	h := Recoverer(nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.JSONEq(t, `{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`, rec.Body.String())
}

func TestRecovererLetsAbortThrough(t *testing.T) {
	h := Recoverer(nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	})
}

// Of several X-Request-Id headers the first is used, and only it is
// forwarded: a backend reading the last logged another ID.
func TestRequestIDOfSeveralForwardsTheOneUsed(t *testing.T) {
	var forwarded []string
	h := RequestID(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		forwarded = r.Header.Values(RequestIDHeader)
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Add(RequestIDHeader, "one")
	req.Header.Add(RequestIDHeader, "two")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, "one", rec.Header().Get(RequestIDHeader))
	assert.Equal(t, []string{"one"}, forwarded)
}
