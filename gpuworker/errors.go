package gpuworker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// apiError is an error rendered in OpenAI's JSON error shape.
type apiError struct {
	status  int
	message string
	typ     string
	param   string
	code    string
}

func (e *apiError) Error() string { return e.message }

func invalidRequest(param, format string, args ...any) *apiError {
	return &apiError{
		status:  http.StatusBadRequest,
		message: fmt.Sprintf(format, args...),
		typ:     "invalid_request_error",
		param:   param,
	}
}

// errorBody is OpenAI's error envelope.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// statusFor maps an error to its HTTP status and OpenAI error fields, in one
// place.
func statusFor(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, ErrTooLong):
		return &apiError{status: http.StatusBadRequest, message: err.Error(),
			typ: "invalid_request_error", code: "context_length_exceeded"}
	case errors.Is(err, ErrStopped):
		return &apiError{status: http.StatusServiceUnavailable, message: err.Error(), typ: "server_error"}
	}
	return &apiError{status: http.StatusInternalServerError, message: err.Error(), typ: "server_error"}
}

// errorEvent is err as the body of a server-sent error event, which ends a
// stream that cannot finish (OpenAI's SDKs report it as a stream error).
func errorEvent(err error) errorBody {
	ae := statusFor(err)
	var body errorBody
	body.Error.Message = ae.message
	body.Error.Type = ae.typ
	if ae.code != "" {
		body.Error.Code = &ae.code
	}
	return body
}

// writeError renders err as an OpenAI JSON error.
func writeError(w http.ResponseWriter, err error) {
	ae := statusFor(err)
	var body errorBody
	body.Error.Message = ae.message
	body.Error.Type = ae.typ
	if ae.param != "" {
		body.Error.Param = &ae.param
	}
	if ae.code != "" {
		body.Error.Code = &ae.code
	}
	writeJSON(w, ae.status, body)
}

// writeJSON writes v with the given status. An encoding error can only come
// from the connection, which the client has abandoned, so it is dropped.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
