package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/sluice-llm/sluice/router/auth"
)

// tokenOnly serves h to callers presenting token as a bearer token (the
// scheme's case is free), and 401 to others; with no token it is h.
func tokenOnly(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(auth.BearerToken(r.Header.Get("Authorization"))))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			writeError(w, &APIError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
				Message: "/metrics needs its token (Authorization: Bearer TOKEN)."})
			return
		}
		h.ServeHTTP(w, r)
	})
}
