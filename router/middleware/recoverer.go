package middleware

import (
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
)

// Recoverer turns a panic in a handler into a logged 500 with an
// OpenAI-shaped body, so one bad request cannot take the process down. It
// re-panics http.ErrAbortHandler, which is how the reverse proxy aborts a
// response that has already started, so the server closes that connection.
// A nil logger means slog.Default().
func Recoverer(logger *slog.Logger) func(http.Handler) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				logger.Error("handler panic", "panic", v, "request_id", RequestIDFrom(r.Context()),
					"path", r.URL.Path, "stack", string(debug.Stack()))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`))
			}()
			next.ServeHTTP(w, r)
		})
	}
}
