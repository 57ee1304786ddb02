package middleware

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// RequestIDHeader carries the request ID in both directions.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds an accepted client-supplied ID.
const maxRequestIDLen = 128

type requestIDKey struct{}

// RequestID accepts a well-formed X-Request-Id from the client or generates
// one, stores it in the request context, and returns it in the response
// header. A client ID is accepted when it is 1 to 128 printable ASCII
// characters; anything else is replaced. Of several X-Request-Id headers
// the first is used, and only it is forwarded.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
			v := []string{id, id} // one allocation for both headers' values
			r.Header[RequestIDHeader] = v[0:1:1]
			w.Header()[RequestIDHeader] = v[1:2:2]
		} else {
			if vs := r.Header[RequestIDHeader]; len(vs) > 1 {
				// Only the ID used goes on: a backend that reads the last
				// of several would log another.
				r.Header[RequestIDHeader] = vs[:1:1]
			}
			w.Header()[RequestIDHeader] = []string{id}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// RequestIDFrom returns the request ID stored by RequestID, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
