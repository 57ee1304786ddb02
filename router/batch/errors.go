package batch

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-llm/sluice/router/apierror"
)

// apiError is what a client of the batch API sees: a status and an
// OpenAI-shaped body ({"error":{"message","type","param","code"}}), as the
// router writes its own.
type apiError struct {
	status  int
	typ     string
	code    string
	param   string
	message string
}

func (e *apiError) Error() string { return e.message }

const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, param: param, code: code,
		message: fmt.Sprintf(format, args...)}
}

// notFound is the one answer for an object that does not exist and for one
// of another tenant's: a tenant cannot probe for the others' IDs.
func notFound(kind, param, id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, param: param, code: "not_found",
		message: fmt.Sprintf("No such %s object: %s", kind, echo(id))}
}

var errInternal = &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "internal_error",
	message: "The server had an error while processing your request."}

func writeError(w http.ResponseWriter, e *apiError) {
	apierror.Write(w, e.status, e.typ, e.code, e.param, e.message)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do about it
}

// maxEcho bounds how much of a client's input an error message repeats.
const maxEcho = 128

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
