package main

import (
	"net/http"

	"github.com/go-chi/cors"

	"github.com/sluice-llm/sluice/configs"
)

// withCORS answers browsers' preflights and marks the answers to the
// origins c allows; with none it returns h as it is (no CORS headers, no
// cost).
func withCORS(c configs.CORS, h http.Handler) http.Handler {
	if len(c.AllowedOrigins) == 0 {
		return h
	}
	return cors.Handler(cors.Options{
		AllowedOrigins: c.AllowedOrigins,
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete},
		// Whatever the SDKs send (Authorization, OpenAI-*, X-Stainless-*,
		// X-Session-Id): the key, not the headers, is what admits a call.
		AllowedHeaders: []string{"*"},
		// What OpenAI's SDKs read from an answer: the request id, and when
		// to retry.
		ExposedHeaders: []string{"X-Request-Id", "Retry-After", "Retry-After-Ms", "X-Should-Retry",
			"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
			"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
		MaxAge: int(c.MaxAge.Std().Seconds()),
	})(h)
}
