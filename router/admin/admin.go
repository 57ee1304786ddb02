package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/sluice-llm/sluice/router/apierror"
)

// Backend is one backend of one model as the admin API shows it.
type Backend struct {
	Model string `json:"model"`
	// ServedModel is the name the backend serves the model under, when it
	// is not the model's own (the config's served_model).
	ServedModel  string   `json:"served_model,omitempty"`
	URL          string   `json:"url"`
	Weight       int      `json:"weight"`
	InRouting    bool     `json:"in_routing"`
	Drained      bool     `json:"drained"`
	Breaker      string   `json:"breaker"`
	InFlight     int64    `json:"in_flight"`
	Waiting      *int     `json:"waiting"`
	Running      *int     `json:"running"`
	KVUsage      *float64 `json:"kv_usage"`
	TTFTMillis   float64  `json:"ttft_ms"`
	TokensPerSec float64  `json:"tokens_per_sec"`
	// Requests counts the attempts this replica sent the backend,
	// Failures those that failed by the backend's fault: unreachable, no
	// answer in time, a 5xx, or an answer broken off (what its breaker
	// counts; until 2026-12-05 only the first, so a backend whose breaker
	// had opened on 5xx answers showed none).
	Requests uint64 `json:"requests_total"`
	Failures uint64 `json:"failures_total"`
	// Removed marks a backend no model serves any more that still has
	// requests in flight (Model is then empty): it is listed until they
	// finish, so an operator knows when its server may stop.
	Removed bool `json:"removed,omitempty"`
}

// Runtime is what the admin API reads and changes.
type Runtime interface {
	Backends() []Backend
	AddBackend(model, url string, weight int, servedModel string) error
	RemoveBackend(model, url string) error
	// Drain takes the backend out of routing (its requests in flight
	// finish) or, with on false, puts it back.
	Drain(model, url string, on bool) error
	// Reload re-reads the config file.
	Reload() error
	// Config is the effective config with secrets redacted.
	Config() ([]byte, error)
}

// ErrNotFound is a model or backend the runtime does not have.
var ErrNotFound = errors.New("admin: no such model or backend")

// Handler serves the admin API for rt to callers presenting token. With a
// status Monitor it also serves the status page: GET /status and its
// assets without the token (they hold no data), and its data, GET
// /admin/status, with it.
func Handler(rt Runtime, token string, status *Monitor) http.Handler {
	want := sha256.Sum256([]byte(token))
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			// The scheme's case is free (RFC 9110), as on the API's listener.
			got := req.Header.Get("Authorization")
			if len(got) > len("Bearer ") && strings.EqualFold(got[:len("Bearer ")], "Bearer ") {
				got = strings.TrimSpace(got[len("Bearer "):])
			} else {
				got = ""
			}
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				fail(w, http.StatusUnauthorized, "a valid admin token is required (Authorization: Bearer TOKEN)")
				return
			}
			next.ServeHTTP(w, req)
		})
	}
	root := chi.NewRouter()
	root.Use(chimw.GetHead) // HEAD is served as GET, headers only
	root.NotFound(auth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fail(w, http.StatusNotFound, "no such admin route")
	})).ServeHTTP)
	root.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// A handler of one's own loses chi's Allow header: name the
		// methods the route takes, as HTTP asks of a 405.
		var allow []string
		for _, m := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
			if m == http.MethodHead && slices.Contains(allow, http.MethodGet) || root.Match(chi.NewRouteContext(), m, req.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		fail(w, http.StatusMethodNotAllowed, "method not allowed on this admin route")
	})
	if status != nil {
		servePage(root)
	}
	r := root.With(auth)
	if status != nil {
		r.Get("/admin/status", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			writeJSON(w, http.StatusOK, status.Status())
		})
	}
	r.Get("/admin/backends", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"backends": rt.Backends()})
	})
	type target struct {
		Model       string `json:"model"`
		URL         string `json:"url"`
		Weight      int    `json:"weight"`
		ServedModel string `json:"served_model"` // POST only: the name the backend serves the model under
	}
	read := func(w http.ResponseWriter, req *http.Request) (target, bool) {
		var t target
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16))
		dec.DisallowUnknownFields()
		// One object and nothing after it: a second one, or trailing
		// text, is a malformed call, not one to act on in part.
		if err := dec.Decode(&t); err != nil || t.Model == "" || t.URL == "" || dec.Decode(&struct{}{}) != io.EOF {
			fail(w, http.StatusBadRequest, `want {"model": NAME, "url": URL[, "weight": N, "served_model": NAME]}`)
			return t, false
		}
		return t, true
	}
	r.Post("/admin/backends", func(w http.ResponseWriter, req *http.Request) {
		if t, ok := read(w, req); ok {
			answer(w, rt.AddBackend(t.Model, t.URL, t.Weight, t.ServedModel))
		}
	})
	r.Delete("/admin/backends", func(w http.ResponseWriter, req *http.Request) {
		if t, ok := read(w, req); ok {
			answer(w, rt.RemoveBackend(t.Model, t.URL))
		}
	})
	r.Post("/admin/backends/drain", func(w http.ResponseWriter, req *http.Request) {
		if t, ok := read(w, req); ok {
			answer(w, rt.Drain(t.Model, t.URL, true))
		}
	})
	r.Post("/admin/backends/undrain", func(w http.ResponseWriter, req *http.Request) {
		if t, ok := read(w, req); ok {
			answer(w, rt.Drain(t.Model, t.URL, false))
		}
	})
	r.Post("/admin/reload", func(w http.ResponseWriter, _ *http.Request) { answer(w, rt.Reload()) })
	r.Get("/admin/config", func(w http.ResponseWriter, _ *http.Request) {
		b, err := rt.Config()
		if err != nil {
			fail(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(b)
	})
	return root
}

func answer(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case errors.Is(err, ErrNotFound):
		fail(w, http.StatusNotFound, err.Error())
	default: // the change was refused: the config it would make is invalid
		fail(w, http.StatusUnprocessableEntity, err.Error())
	}
}

// fail writes an error in the shape the OpenAI API's errors have
// ({"error":{"message","type","param","code"}}), so that one client reads
// both listeners' errors.
func fail(w http.ResponseWriter, status int, msg string) {
	typ, code := "invalid_request_error", ""
	switch status {
	case http.StatusUnauthorized:
		code = "invalid_admin_token"
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusMethodNotAllowed:
		code = "method_not_allowed"
	case http.StatusBadRequest:
		code = "invalid_json"
	case http.StatusUnprocessableEntity:
		code = "invalid_config"
	default:
		typ, code = "server_error", "internal_error"
	}
	apierror.Write(w, status, typ, code, "", msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
