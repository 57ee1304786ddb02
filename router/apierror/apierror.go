// Package apierror writes an error in the OpenAI API's shape,
// {"error":{"message","type","param","code"}}, for each of the router's
// listeners (the API, the Files and Batch APIs, the admin API), so that one
// client reads them all. It is a leaf any part of the router may import.
package apierror

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Write sends status with the error body (Marshal). Headers set on w
// before the call (Retry-After, say) go out with it.
func Write(w http.ResponseWriter, status int, typ, code, param, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(Marshal(typ, code, param, message)) // the client may be gone; nothing to do about it
}

// Marshal is the error body, a line of JSON; an empty param or code is
// sent as null, as OpenAI's are. The message is written as is, without
// JSON's HTML escapes (">= 1", not "\u003e= 1").
func Marshal(typ, code, param, message string) []byte {
	body := envelope{Error: fields{Message: message, Type: typ}}
	if param != "" {
		body.Error.Param = &param
	}
	if code != "" {
		body.Error.Code = &code
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body) // strings and nils: it cannot fail
	return b.Bytes()
}

type envelope struct {
	Error fields `json:"error"`
}

type fields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
