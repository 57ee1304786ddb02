package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// tokenOnly serves h to callers presenting token as a bearer token (the
// scheme's case is free), and 401 to others; with no token it is h.
func tokenOnly(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(bearerToken(r.Header.Get("Authorization"))))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			writeError(w, &APIError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
				Message: "/metrics needs its token (Authorization: Bearer TOKEN)."})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken is the token of an "Authorization: Bearer TOKEN" value, ""
// for any other.
func bearerToken(h string) string {
	const p = "Bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}
