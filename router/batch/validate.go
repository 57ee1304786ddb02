package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

// span is where one request sits in its input file.
type span struct {
	off int64
	n   int
}

// scanLines calls fn with each line of r that is not blank, its 1-based
// line number in the file and its place. A line longer than maxLine
// bytes ends the scan with an error naming it.
func scanLines(r io.Reader, maxLine int, fn func(no int, sp span, line []byte) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	var off int64
	for no := 1; ; no++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", no, maxLine)
		}
		if no == 1 && bytes.HasPrefix(line, utf8BOM) {
			// Some Windows editors start a UTF-8 file with a byte order
			// mark; it is not part of the first line's JSON.
			line = line[len(utf8BOM):]
			off += int64(len(utf8BOM))
		}
		if len(line) > 0 {
			if t := bytes.TrimSpace(line); len(t) > 0 {
				if ferr := fn(no, span{off: off, n: len(line)}, line); ferr != nil {
					return ferr
				}
			}
			off += int64(len(line))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var errLineTooLong = errors.New("line too long")

var utf8BOM = []byte("\xef\xbb\xbf")

// readLine reads up to and including the next '\n', at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}

// maxErrors bounds the problems a failed validation lists.
const maxErrors = 100

// checked is a valid input file, read for running.
type checked struct {
	index     []span
	model     string // the first line's, every line's
	modelLine int    // the first line naming it
	tokens    int64  // the estimate of all lines
}

// lineBody holds the few body fields validation reads.
type lineBody struct {
	Model               string `json:"model"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	MaxOutputTokens     *int   `json:"max_output_tokens"` // the Responses API's
	N                   *int   `json:"n"`
	BestOf              *int   `json:"best_of"`
	// The prompt, for its size (jsonscan.RouteTokens, as the router
	// estimates it).
	Messages, Prompt, Input json.RawMessage
}

// maxChoices is the most completions a line may ask for (n), as the router
// allows; maxOutputEstimate bounds the output counted for each, as the
// router's estimate does (policies.OutputEstimate), so that the sum cannot
// overflow.
const (
	maxChoices        = 128
	maxOutputEstimate = 1 << 30
)

// validate reads a batch's input line by line: each must be a JSON object
// with a unique custom_id, method POST, the batch's url and a body naming
// a model. It returns the file's index, or every problem (up to
// maxErrors), each naming its line.
func validate(r io.Reader, endpoint string, maxLines, maxLine, maxBody, defaultMaxTokens int) (checked, []LineError) {
	var (
		c    checked
		errs []LineError
		seen = map[string]int{}
	)
	bad := func(no int, code, param, format string, args ...any) {
		errs = append(errs, LineError{Code: code, Param: param, Line: no,
			Message: fmt.Sprintf("line %d: ", no) + fmt.Sprintf(format, args...)})
	}
	errStop := errors.New("stop")
	err := scanLines(r, maxLine, func(no int, sp span, raw []byte) error {
		if len(c.index) >= maxLines {
			errs = append(errs, LineError{Code: "too_many_requests_in_file",
				Message: fmt.Sprintf("the file has more than %d requests, the most a batch may hold", maxLines)})
			return errStop
		}
		c.index = append(c.index, sp)
		before := len(errs)
		var in inputLine
		if err := json.Unmarshal(raw, &in); err != nil {
			bad(no, "invalid_json_line", "", "not a JSON object of custom_id, method, url and body: %s", jsonProblem(err))
		} else {
			checkLine(no, in, endpoint, seen, bad, &c, maxBody, defaultMaxTokens)
		}
		if len(errs) >= maxErrors && len(errs) > before {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		errs = append(errs, LineError{Code: "invalid_file", Message: err.Error()})
	}
	if len(errs) == 0 && len(c.index) == 0 {
		errs = append(errs, LineError{Code: "empty_file", Message: "the input file holds no requests"})
	}
	if len(errs) > 0 {
		return checked{}, errs
	}
	return c, nil
}

func checkLine(no int, in inputLine, endpoint string, seen map[string]int, bad func(int, string, string, string, ...any), c *checked, maxBody, defaultMaxTokens int) {
	switch {
	case in.CustomID == nil || *in.CustomID == "":
		bad(no, "missing_required_parameter", "custom_id", "custom_id is required")
	default:
		if prev, dup := seen[*in.CustomID]; dup {
			bad(no, "duplicate_custom_id", "custom_id", "custom_id %q is already used by line %d; each request needs its own",
				echo(*in.CustomID), prev)
		} else {
			seen[*in.CustomID] = no
		}
	}
	if in.Method != "POST" {
		bad(no, "invalid_method", "method", "method must be \"POST\", got %q", echo(in.Method))
	}
	switch {
	case !knownEndpoint(in.URL):
		bad(no, "invalid_url", "url", "url %q is not one of %s", echo(in.URL), strings.Join(Endpoints(), ", "))
	case in.URL != endpoint:
		bad(no, "mismatched_url", "url", "url %q is not the batch's endpoint %q", in.URL, endpoint)
	}
	var body lineBody
	if maxBody > 0 && len(in.Body)+flexGrowth > maxBody/3 {
		// Each would be refused 413 when it ran, after the runner had held
		// it in memory several times over. Measured as sent: re-encoding
		// can triple a body's member names (an invalid byte becomes
		// U+FFFD, U+2028 an escape), so a large one is encoded to see.
		sent := len(in.Body) + flexGrowth
		if fb, err := flexBody(in.Body); err == nil {
			sent = len(fb)
		}
		if sent > maxBody {
			bad(no, "request_too_large", "body", "body is %d bytes as sent (with its service_tier); the server takes request bodies of at most %d (max_body_bytes)",
				sent, maxBody)
			return
		}
	}
	if len(bytes.TrimSpace(in.Body)) == 0 || in.Body[0] != '{' {
		bad(no, "invalid_body", "body", "body must be a JSON object (the request to send)")
		return
	}
	if err := json.Unmarshal(in.Body, &body); err != nil {
		bad(no, "invalid_body", "body", "body: %s", jsonProblem(err))
		return
	}
	if body.Model == "" {
		bad(no, "missing_required_parameter", "body.model", "body.model is required")
		return
	}
	switch {
	case c.model == "":
		c.model, c.modelLine = body.Model, no
	case body.Model != c.model: // as OpenAI's: one model per batch
		bad(no, "mismatched_model", "body.model", "body.model %q is not %q, the model of line %d: a batch runs one model",
			echo(body.Model), echo(c.model), c.modelLine)
	}
	// The output as the router reserves it: the larger of
	// max_completion_tokens and max_tokens (a backend reads one or the
	// other), and the tier's default where neither is sent (on
	// completions, where max_tokens is not, as legacy servers read it
	// alone); n or best_of choices, per prompt of a completion's prompt
	// list.
	out := 0
	for _, v := range []*int{body.MaxTokens, body.MaxCompletionTokens, body.MaxOutputTokens} {
		if v != nil {
			out = max(out, *v)
		}
	}
	switch {
	case in.URL == "/v1/embeddings":
		out = 0
	case out == 0 || in.URL == "/v1/completions" && body.MaxTokens == nil:
		out = max(out, defaultMaxTokens)
	}
	choices := 1
	for _, m := range []struct {
		name string
		v    *int
	}{{"n", body.N}, {"best_of", body.BestOf}} {
		if m.v == nil {
			continue
		}
		if *m.v < 1 || *m.v > maxChoices {
			bad(no, "invalid_value", "body."+m.name, "body.%s must be from 1 to %d, got %d", m.name, maxChoices, *m.v)
			return
		}
		choices = max(choices, *m.v)
	}
	if in.URL == "/v1/completions" {
		choices *= jsonscan.PromptCount(body.Prompt)
	}
	c.tokens += int64(jsonscan.RouteTokens(in.URL, body.Messages, body.Prompt, body.Input, len(in.Body))) +
		int64(min(max(out, 0), maxOutputEstimate))*int64(choices)
}

// jsonProblem says what is wrong with a JSON value in a few words.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", te.Field, kind(te.Type.Kind().String()), te.Value)
		}
		return "want a JSON object, got " + te.Value
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error())
	}
	return "invalid JSON: " + err.Error()
}

func kind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int", "int64":
		return "an integer"
	case "ptr", "struct", "map":
		return "an object"
	}
	return k
}
