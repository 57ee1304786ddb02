package router

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/apierror"
	"github.com/sluice-llm/sluice/router/auth"
)

// Error types as OpenAI names them.
const (
	typeInvalidRequest    = "invalid_request_error"
	typeServer            = "server_error"
	typeRateLimit         = "requests"
	typeInsufficientQuota = "insufficient_quota"
)

// APIError is an error a client sees: an HTTP status and an OpenAI-shaped
// body. RetryAfter, when positive, is sent as Retry-After (whole seconds,
// rounded up).
type APIError struct {
	Status     int
	Type       string
	Code       string
	Param      string
	Message    string
	RetryAfter time.Duration
	// Final marks an answer that the same request cannot change by
	// waiting (over a limit's whole burst, the day's quota spent): it is
	// sent with X-Should-Retry: false, which OpenAI's SDKs obey where
	// they would otherwise retry every 429.
	Final bool
}

func (e *APIError) Error() string { return e.Message }

// writeError renders e as {"error":{"message","type","param","code"}}. It is
// the one place client-visible errors are written.
func writeError(w http.ResponseWriter, e *APIError) {
	h := w.Header()
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(int64((e.RetryAfter+time.Millisecond-1)/time.Millisecond), 10))
	}
	if e.Final {
		h.Set("X-Should-Retry", "false")
	}
	apierror.Write(w, e.Status, e.Type, e.Code, e.Param, e.Message)
}

func badRequest(param, code, msg string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code, Message: msg}
}

// errBodiesFull answers a request whose body, as it arrives, would pass
// Options.MaxBodyBytesInFlight.
var errBodiesFull = &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_overloaded",
	Message: "The server holds as many request bodies as it may; please retry.", RetryAfter: time.Second}

// errShuttingDown answers a request admission bound after the drain time
// ran out (Router.EndStreams): it is not started, as the server closes.
var errShuttingDown = &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
	Message: "The server is shutting down; retry the request.", RetryAfter: time.Second}

// noRoute answers a path Sluice does not serve, naming it as OpenAI's API
// does ("Invalid URL (POST /v1/audio/speech)").
func noRoute(r *http.Request) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "not_found",
		Message: "Invalid URL (" + echo(r.Method) + " " + echo(r.URL.EscapedPath()) + ")"}
}

// errClientLeft is a request whose client closed the connection before
// its body arrived: logged as 499, never answered.
var errClientLeft = errors.New("router: the client left before its request body arrived")

// modelNotFoundError is a model that is not served, or not to this tenant.
type modelNotFoundError struct{ model string }

func (e *modelNotFoundError) Error() string { return "model not found: " + e.model }

// upstreamError is an attempt that failed before anything was relayed;
// err is for the log only, never shown to the client.
type upstreamError struct {
	class backends.ErrorClass
	err   error
	// retryAfter, for a backend's 502, 503 or 429 answered as busy, is the
	// wait it asked for.
	retryAfter time.Duration
}

func (e *upstreamError) Error() string {
	if e.err == nil {
		return "upstream " + e.class.String()
	}
	return "upstream " + e.class.String() + ": " + e.err.Error()
}

func (e *upstreamError) Unwrap() error { return e.err }

// noBackendError is a model none of whose endpoints is in routing.
type noBackendError struct{ retryAfter time.Duration }

func (e *noBackendError) Error() string { return "no backend available" }

// maxEcho bounds how much of a client's input an error message repeats.
const maxEcho = 256

func echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

// errTotalTimeout is a request whose route's total timeout ran out before
// its answer started.
var errTotalTimeout = errors.New("router: the request's total timeout ran out")

// errorFor is the one place a pipeline error becomes what the client sees:
// a status and an OpenAI-shaped body. Transport error text never reaches
// the client.
func errorFor(err error) *APIError {
	var (
		apiErr   *APIError
		notFound *modelNotFoundError
		reject   *quota.RejectError
		upstream *upstreamError
		noBack   *noBackendError
		shed     *admission.ShedError
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, auth.ErrMissingKey):
		return &APIError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
			Message: "You didn't provide an API key. Provide it in an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY)."}
	case errors.Is(err, auth.ErrInvalidKey):
		return &APIError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
			Message: "Incorrect API key provided."}
	case errors.As(err, &notFound):
		return &APIError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: "The model `" + echo(notFound.model) + "` does not exist or you do not have access to it."}
	case errors.As(err, &reject):
		e := &APIError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "rate_limit_exceeded",
			Message: reject.Error(), RetryAfter: max(reject.RetryAfter, time.Millisecond)}
		if reject.TooLarge {
			// 429 as OpenAI answers a request over a limit, but no
			// Retry-After: waiting does not make it fit, and clients that
			// honour the header would wait to fail again.
			e.RetryAfter, e.Final = 0, true
		}
		switch {
		case reject.Dimension == quota.DimTokensPerDay && !reject.TooLarge:
			e.Type, e.Code, e.Final = typeInsufficientQuota, "insufficient_quota", true
		case reject.Dimension != quota.DimRequests && reject.Dimension != quota.DimConcurrency:
			e.Type = "tokens"
		}
		return e
	case errors.As(err, &shed):
		if shed.Class == admission.Flex { // as OpenAI answers flex when it has no capacity
			return &APIError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "resource_unavailable",
				Message: "Flex capacity is unavailable right now (" + shed.Reason + "); please retry later.", RetryAfter: shed.RetryAfter}
		}
		return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_overloaded",
			Message: "The fleet is at capacity (" + shed.Reason + "); please retry.", RetryAfter: shed.RetryAfter}
	case errors.Is(err, quota.ErrUnavailable):
		return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "rate_limit_unavailable",
			Message: "Rate limits cannot be checked right now; please retry.", RetryAfter: time.Second}
	case errors.As(err, &noBack):
		return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "no_backend_available",
			Message: "No backend for this model is available.", RetryAfter: noBack.retryAfter}
	case errors.As(err, &upstream):
		switch upstream.class {
		case backends.ClassClientGone:
			return &APIError{Status: statusClientClosed, Message: "client closed request"}
		case backends.ClassTimeout:
			return &APIError{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "upstream_timeout",
				Message: "The backend did not answer in time."}
		case backends.ClassUnreachable:
			return &APIError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_unavailable",
				Message: "No backend for this model could be reached."}
		case backends.ClassLocal: // out of file descriptors: shed until some close
			return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_overloaded",
				Message: "The server is at its connection limit; please retry.", RetryAfter: time.Second}
		case backends.ClassUpstream4xx: // a backend's 429 (or 503) turned back, with no retry left or nowhere else to go
			return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_overloaded",
				Message: "The backends are busy; please retry.", RetryAfter: cmp.Or(upstream.retryAfter, time.Second)}
		}
		return &APIError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_error",
			Message: "The backend failed to answer."}
	case errors.Is(err, errTotalTimeout):
		return &APIError{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "request_timeout",
			Message: "The request took longer than its time limit."}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errClientLeft):
		return &APIError{Status: statusClientClosed, Message: "client closed request"}
	}
	return &APIError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal_error",
		Message: "The server had an error while processing your request."}
}

// setRateHeaders writes OpenAI's x-ratelimit-* headers for the limited
// dimensions of d. Every allowed request gets them, so the values are
// formatted into one string and their slices share one array: two
// allocations where a header at a time took about twenty (issue 12).
func setRateHeaders(h http.Header, d quota.Decision) {
	names := [...][3]string{ // canonical, so they go straight into the map
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	}
	var (
		buf  [192]byte
		keys [6]string
		ends [6]int
		n    int
	)
	b := buf[:0]
	for i, win := range [...]quota.Window{d.Requests, d.Tokens} {
		if win.Limit <= 0 {
			continue
		}
		b = strconv.AppendInt(b, win.Limit, 10)
		keys[n], ends[n] = names[i][0], len(b)
		b = strconv.AppendInt(b, max(win.Remaining, 0), 10)
		keys[n+1], ends[n+1] = names[i][1], len(b)
		b = appendReset(b, win.Reset)
		keys[n+2], ends[n+2] = names[i][2], len(b)
		n += 3
	}
	if n == 0 {
		return
	}
	all := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		h[keys[i]] = vals[i : i+1 : i+1] // capped: an Add copies rather than overwrite a neighbour
		start = ends[i]
	}
}

// appendReset appends a duration as OpenAI writes it ("1s", "6m0s", "20ms").
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		b = strconv.AppendInt(b, int64((d+time.Millisecond-1)/time.Millisecond), 10)
		return append(b, "ms"...)
	}
	return append(b, d.Round(time.Millisecond).String()...)
}
