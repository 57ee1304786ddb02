package batch

import (
	"encoding/json"
	"slices"
	"time"
)

// Status is a batch's state, as OpenAI names it.
type Status string

// The batch statuses. A batch starts validating; a valid one runs
// (in_progress), then finalizing writes its output and error files and it
// ends completed, or expired when its completion window ran out first.
// An invalid one ends failed; a cancelled one passes through cancelling.
const (
	StatusValidating Status = "validating"
	StatusFailed     Status = "failed"
	StatusInProgress Status = "in_progress"
	StatusFinalizing Status = "finalizing"
	StatusCompleted  Status = "completed"
	StatusExpired    Status = "expired"
	StatusCancelling Status = "cancelling"
	StatusCancelled  Status = "cancelled"
)

// Terminal reports whether s is a final status: the batch never changes
// again.
func (s Status) Terminal() bool {
	return s == StatusFailed || s == StatusCompleted || s == StatusExpired || s == StatusCancelled
}

// Purposes of files: clients upload PurposeBatch files; Sluice writes a
// batch's output and error files as PurposeBatchOutput.
const (
	PurposeBatch       = "batch"
	PurposeBatchOutput = "batch_output"
)

// Endpoints lists the inference routes a batch may run, in the order
// error messages name them.
func Endpoints() []string {
	return []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
}

func knownEndpoint(url string) bool { return slices.Contains(Endpoints(), url) }

// Owner is who calls the batch API: the tenant whose files and batches
// these are, and what its tier allows. The zero Owner is the one owner of
// a router without tenants.
type Owner struct {
	// Tenant names the tenant; batch lines run as it.
	Tenant string
	// Tier names its tier, for the cap on queued batch tokens.
	Tier string
	// DefaultMaxTokens is the output a line without max_tokens is
	// expected to use, for the queued-token estimate.
	DefaultMaxTokens int
	// NoFlex is set when the tier may not use the flex service class,
	// which batch lines run in: such a tenant cannot create batches.
	NoFlex bool
}

// FileMeta is a stored file's metadata; its bytes live in the data
// directory.
type FileMeta struct {
	ID        string `json:"id"`
	Owner     string `json:"owner"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	// ExpiresAt is when the file is deleted (Unix seconds); 0: kept
	// until deleted.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

// expired reports whether f's expiry has passed at now: the API no
// longer shows it, and the runner deletes it once no batch uses it.
func (f FileMeta) expired(now time.Time) bool {
	return f.ExpiresAt > 0 && now.Unix() >= f.ExpiresAt
}

// LineError is one problem found in a batch's input, or the reason a
// batch failed as a whole (Line 0).
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Line    int    `json:"line,omitempty"`
}

// Usage is the tokens a finished batch used.
type Usage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// Counts are a batch's lines by state.
type Counts struct {
	Total int `json:"total"`
	// Completed lines got a 2xx answer; Failed lines an error, or none
	// before the batch expired.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Claimed lines are running now, on some replica (unexpired claims).
	Claimed int `json:"-"`
}

// Done is how many lines have a result.
func (c Counts) Done() int { return c.Completed + c.Failed }

// BatchMeta is a batch's state in the Store: what the client asked for,
// where it is in its life, and once it ends, its files and counts. Line
// progress is kept apart, per line (Store.Claim, Finish).
type BatchMeta struct {
	ID               string            `json:"id"`
	Owner            string            `json:"owner"`
	Tier             string            `json:"tier,omitempty"`
	Endpoint         string            `json:"endpoint"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Status           Status            `json:"status"`
	// Model is the first line's model.
	Model  string      `json:"model,omitempty"`
	Errors []LineError `json:"errors,omitempty"`
	// Total is the number of lines, once validated.
	Total int `json:"total"`
	// DefaultMaxTokens is the owner's, for the estimate.
	DefaultMaxTokens int `json:"default_max_tokens,omitempty"`
	// EstimatedTokens is the queued-token estimate of the whole batch:
	// prompt bytes / 4 + max_tokens (or DefaultMaxTokens), summed.
	EstimatedTokens int64 `json:"estimated_tokens,omitempty"`
	// OutputExpiry is how long the batch's output and error files are
	// kept after they are written, in seconds (output_expires_after); 0:
	// until deleted.
	OutputExpiry int64 `json:"output_expiry,omitempty"`

	OutputFileID string `json:"output_file_id,omitempty"`
	ErrorFileID  string `json:"error_file_id,omitempty"`
	// Counts and Usage are final once the batch is terminal.
	Counts Counts `json:"counts"`
	Usage  *Usage `json:"usage,omitempty"`

	// Ending is the status finalizing leads to (completed, expired or
	// cancelled); Finalizer holds the finalizing until FinalizeUntil
	// (Unix ms), after which another runner may take it over.
	Ending        Status `json:"ending,omitempty"`
	Finalizer     string `json:"finalizer,omitempty"`
	FinalizeUntil int64  `json:"finalize_until,omitempty"`

	CreatedAt    int64 `json:"created_at"`
	InProgressAt int64 `json:"in_progress_at,omitempty"`
	ExpiresAt    int64 `json:"expires_at"`
	FinalizingAt int64 `json:"finalizing_at,omitempty"`
	CompletedAt  int64 `json:"completed_at,omitempty"`
	FailedAt     int64 `json:"failed_at,omitempty"`
	ExpiredAt    int64 `json:"expired_at,omitempty"`
	CancellingAt int64 `json:"cancelling_at,omitempty"`
	CancelledAt  int64 `json:"cancelled_at,omitempty"`
}

// clone returns a deep copy, so a Store never shares what a caller may
// change.
func (b BatchMeta) clone() BatchMeta {
	if b.Metadata != nil {
		m := make(map[string]string, len(b.Metadata))
		for k, v := range b.Metadata {
			m[k] = v
		}
		b.Metadata = m
	}
	b.Errors = slices.Clone(b.Errors)
	if b.Usage != nil {
		u := *b.Usage
		b.Usage = &u
	}
	return b
}

// Result is how one line ended: the inference route's answer, or, for a
// line that never got one, an error code.
type Result struct {
	CustomID string `json:"custom_id"`
	// Status is the answer's HTTP status; 0 when the line never ran.
	Status    int             `json:"status,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	// ErrCode and ErrMessage say why a line has no answer.
	ErrCode    string `json:"error_code,omitempty"`
	ErrMessage string `json:"error_message,omitempty"`
	// Input and Output are the tokens the answer reports using.
	Input  int64 `json:"input,omitempty"`
	Output int64 `json:"output,omitempty"`
}

// OK reports whether the line got a 2xx answer.
func (r Result) OK() bool { return r.Status/100 == 2 }
