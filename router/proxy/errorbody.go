package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-llm/sluice/router/apierror"
)

// maxErrorBody bounds how much of a backend's error answer is read to
// put it in OpenAI's shape.
const maxErrorBody = 64 << 10

// maxErrorText bounds the plain text of a backend's 4xx kept as its
// message.
const maxErrorText = 512

// normalizeError rewrites a backend's error answer (status 400 or more)
// to OpenAI's shape, {"error":{"message","type","param","code"}}, so that
// clients read every error alike: one already in that shape passes as it
// is; vLLM's and SGLang's ({"object":"error","message",...}) and TGI's
// ({"error":"...","error_type":...}) keep their message and type; plain
// text keeps its first 512 bytes as the message for a 4xx and is replaced
// for a 5xx, whose text (an exception, a node name) is the backend's
// business. A compressed body passes as it is.
func normalizeError(res *http.Response) {
	if res.Header.Get("Content-Encoding") != "" {
		return
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_ = res.Body.Close()
	body := errorBody(res.StatusCode, raw, err == nil)
	if body == nil {
		body = raw // already OpenAI's shape
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	res.Header.Set("Content-Length", strconv.Itoa(len(body)))
	res.Header.Set("Content-Type", "application/json")
}

// errorBody is the OpenAI-shaped body for a backend's error answer raw
// (read whole when complete), or nil when raw is in that shape already.
func errorBody(status int, raw []byte, complete bool) []byte {
	var v struct {
		Error     json.RawMessage `json:"error"`
		Message   *string         `json:"message"`
		Type      string          `json:"type"`
		ErrorType string          `json:"error_type"`
		Param     any             `json:"param"`
		Code      any             `json:"code"`
	}
	typ, code, param, msg := "", "", "", ""
	if complete && json.Unmarshal(raw, &v) == nil {
		var inner struct {
			Message *string `json:"message"`
			Type    string  `json:"type"`
			Param   any     `json:"param"`
			Code    any     `json:"code"`
		}
		var text string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != nil:
			if status < 500 {
				return nil // {"error":{"message",...}}: OpenAI's
			}
			// A 5xx's message is the backend's inside (a connection
			// string, a node, a secret in an exception), not the client's
			// business in any shape: its type and code are kept.
			typ, v.Param, v.Code = inner.Type, inner.Param, inner.Code
		case json.Unmarshal(v.Error, &text) == nil: // TGI
			msg, typ = text, v.ErrorType
		case v.Message != nil: // vLLM, SGLang
			msg, typ = *v.Message, v.Type
		}
		if status >= 500 {
			msg = ""
			if s, ok := v.Code.(string); ok && !isToken(s) {
				v.Code = nil // exception text put in code travels no further than the message
			}
		}
		if s, ok := v.Param.(string); ok {
			param = s
		}
		if s, ok := v.Code.(string); ok {
			code = s
		}
	} else if status < 500 {
		msg = strings.TrimSpace(string(raw[:min(len(raw), maxErrorText)]))
		for !utf8.ValidString(msg) { // cut inside a character
			msg = msg[:len(msg)-1]
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(fmt.Sprintf("The backend answered %d %s", status, http.StatusText(status))) + "."
	}
	if typ == "" || strings.ToLower(typ) != typ || !strings.HasSuffix(typ, "_error") {
		typ = "invalid_request_error" // as OpenAI types a 4xx; vLLM's "BadRequestError" is no OpenAI type
		if status >= 500 {
			typ = "server_error"
		}
	}
	return apierror.Marshal(typ, code, param, msg)
}

// isToken reports whether code reads as an error code ("overloaded",
// "model_not_found"): at most 64 lower-case letters, digits and _ . -.
func isToken(code string) bool {
	if code == "" || len(code) > 64 {
		return false
	}
	for _, c := range code {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
