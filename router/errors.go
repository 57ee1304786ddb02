package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Error types as OpenAI names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
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
}

func (e *APIError) Error() string { return e.Message }

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeError renders e as {"error":{"message","type","param","code"}}. It is
// the one place client-visible errors are written.
func writeError(w http.ResponseWriter, e *APIError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	body := errorBody{Error: errorFields{Message: e.Message, Type: e.Type}}
	if e.Param != "" {
		body.Error.Param = &e.Param
	}
	if e.Code != "" {
		body.Error.Code = &e.Code
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body) // the client may be gone; nothing to do about it
}

func badRequest(param, code, msg string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code, Message: msg}
}
