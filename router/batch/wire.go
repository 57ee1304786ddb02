package batch

import "encoding/json"

// The JSON objects of OpenAI's Files and Batch APIs, as the official SDKs
// read them.

type fileObject struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int64   `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	ExpiresAt     *int64  `json:"expires_at"`
	StatusDetails *string `json:"status_details"`
}

func toFileObject(f FileMeta) fileObject {
	o := fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt, Filename: f.Filename,
		Purpose: f.Purpose, Status: "processed"}
	if f.ExpiresAt > 0 {
		o.ExpiresAt = &f.ExpiresAt
	}
	return o
}

type fileDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// batchObject has every key of OpenAI's Batch object at every status, as
// OpenAI's answers do: a value not known yet is null (model until the
// input is validated, usage until the batch ends), never a missing key.
type batchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            *string           `json:"model"`
	Errors           *batchErrors      `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           Status            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    requestCounts     `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
	Usage            *batchUsage       `json:"usage"`
}

type batchErrors struct {
	Object string       `json:"object"`
	Data   []batchError `json:"data"`
}

type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

type requestCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

type batchUsage struct {
	InputTokens         int64          `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int64          `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int64          `json:"total_tokens"`
}

func toBatchObject(b BatchMeta, c Counts) batchObject {
	o := batchObject{ID: b.ID, Object: "batch", Endpoint: b.Endpoint, InputFileID: b.InputFileID,
		CompletionWindow: b.CompletionWindow, Status: b.Status, CreatedAt: b.CreatedAt, Metadata: b.Metadata,
		InProgressAt: opt(b.InProgressAt), ExpiresAt: opt(b.ExpiresAt), FinalizingAt: opt(b.FinalizingAt),
		CompletedAt: opt(b.CompletedAt), FailedAt: opt(b.FailedAt), ExpiredAt: opt(b.ExpiredAt),
		CancellingAt: opt(b.CancellingAt), CancelledAt: opt(b.CancelledAt),
		RequestCounts: requestCounts{Total: c.Total, Completed: c.Completed, Failed: c.Failed}}
	if b.Model != "" {
		o.Model = &b.Model
	}
	if b.OutputFileID != "" {
		o.OutputFileID = &b.OutputFileID
	}
	if b.ErrorFileID != "" {
		o.ErrorFileID = &b.ErrorFileID
	}
	if len(b.Errors) > 0 {
		o.Errors = &batchErrors{Object: "list", Data: make([]batchError, len(b.Errors))}
		for i, e := range b.Errors {
			be := batchError{Code: e.Code, Message: e.Message}
			if e.Param != "" {
				be.Param = &e.Param
			}
			if e.Line > 0 {
				be.Line = &e.Line
			}
			o.Errors.Data[i] = be
		}
	}
	if u := b.Usage; u != nil {
		o.Usage = &batchUsage{InputTokens: u.Input, OutputTokens: u.Output, TotalTokens: u.Input + u.Output,
			InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
	}
	return o
}

func opt(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

type listObject[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// batchRequest is the body of POST /v1/batches.
type batchRequest struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
	// OutputExpiresAfter: how long the output and error files are kept.
	OutputExpiresAfter *expiresAfter `json:"output_expires_after"`
}

// expiresAfter is OpenAI's expiration policy of a file: deleted seconds
// after its anchor, the file's creation (the only anchor there is).
type expiresAfter struct {
	Anchor  *string `json:"anchor"`
	Seconds *int64  `json:"seconds"`
}

// Bounds of an expiration policy's seconds, as OpenAI's: an hour to 30
// days.
const (
	minExpirySeconds = 3600
	maxExpirySeconds = 30 * 24 * 3600
)

// check validates e, named param in errors, and returns its seconds.
func (e expiresAfter) check(param string) (int64, error) {
	switch {
	case e.Anchor == nil:
		return 0, badRequest(param+".anchor", "missing_required_parameter", "Missing required parameter: '%s.anchor'.", param)
	case *e.Anchor != "created_at":
		return 0, badRequest(param+".anchor", "invalid_value", "%s.anchor must be \"created_at\", got %q", param, echo(*e.Anchor))
	case e.Seconds == nil:
		return 0, badRequest(param+".seconds", "missing_required_parameter", "Missing required parameter: '%s.seconds'.", param)
	case *e.Seconds < minExpirySeconds || *e.Seconds > maxExpirySeconds:
		return 0, badRequest(param+".seconds", "invalid_value", "%s.seconds must be between %d (1 hour) and %d (30 days), got %d",
			param, minExpirySeconds, maxExpirySeconds, *e.Seconds)
	}
	return *e.Seconds, nil
}

// inputLine is one line of a batch input file.
type inputLine struct {
	CustomID *string         `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// outputLine is one line of a batch's output or error file.
type outputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *outputResponse `json:"response"`
	Error    *outputError    `json:"error"`
}

type outputResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type outputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
