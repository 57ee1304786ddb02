package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxFileBytes     = 200 << 20
	DefaultMaxLines         = 50_000
	DefaultCompletionWindow = 24 * time.Hour
)

// Options configures a Service. Zero fields mean the documented defaults.
type Options struct {
	// Store keeps files' metadata, batches and line progress. Required.
	Store Store
	// Dir is where file contents live (created if need be). Required.
	// Replicas sharing a Store must share it too.
	Dir string
	// Owner says who calls, from the request's context (the router puts
	// the authenticated tenant there). Nil: every caller is the zero
	// Owner, as on a router without tenants.
	Owner func(context.Context) Owner
	// MaxFileBytes caps an uploaded file (413 beyond). Default 200 MiB.
	MaxFileBytes int64
	// MaxTenantBytes caps the bytes of one tenant's files (uploads and
	// outputs): an upload past it is refused, and so is a batch created
	// while the tenant is at or over it. A batch's output and error files
	// are written whatever the cap, so the batches a tenant has running
	// may take it past. Zero or negative: no cap.
	MaxTenantBytes int64
	// MaxLines caps the requests in one input file. Default 50,000.
	MaxLines int
	// FileExpiry is how long an uploaded file is kept when its upload
	// does not say (expires_after): OpenAI deletes batch files after 30
	// days. Zero or negative: kept until deleted. Output files are kept
	// until deleted unless their batch says (output_expires_after).
	FileExpiry time.Duration
	// MaxBodyBytes is the router's cap on a request body: an input line
	// whose body is larger fails the batch's validation, naming it. Zero:
	// no cap but the line's (16 MiB).
	MaxBodyBytes int64
	// UploadIdle bounds an upload's pace: it must bring UploadStep bytes
	// (64 KiB) within each UploadIdle, or it ends with 408 and its
	// connection closes. An upload that keeps coming may take as long as
	// it needs. Default 30s (cmd/sluice passes body_read_timeout).
	UploadIdle time.Duration
	// CompletionWindow is how long a batch may run before it expires
	// (clients ask for "24h", the only window OpenAI offers). Default 24h.
	CompletionWindow time.Duration
	// QueuedTokens caps, per tier name, the estimated tokens of a
	// tenant's batches that have not ended; a batch that would pass it
	// fails with token_limit_exceeded. A tier not listed has no cap.
	QueuedTokens map[string]int64
	// Logger receives failures of the Store and the data directory.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Service serves OpenAI's Files and Batch APIs (/v1/files, /v1/batches)
// over a Store; a Runner runs the batches it takes. It is an http.Handler
// for those routes.
type Service struct {
	o     Options
	blobs blobs
	// wake tells a Runner in this process that a batch was created or
	// cancelled, so it need not wait for its next round.
	wake chan struct{}
	// saving makes an upload's check against MaxTenantBytes and its save
	// one step.
	saving sync.Mutex
}

var _ http.Handler = (*Service)(nil)

// New validates o and returns a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("batch: nil Store")
	}
	if o.Dir == "" {
		return nil, errors.New("batch: no Dir")
	}
	if o.MaxFileBytes < 0 || o.MaxLines < 0 || o.CompletionWindow < 0 || o.UploadIdle < 0 {
		return nil, errors.New("batch: MaxFileBytes, MaxLines, CompletionWindow and UploadIdle must not be negative")
	}
	o.UploadIdle = cmp.Or(o.UploadIdle, DefaultUploadIdle)
	o.MaxFileBytes = cmp.Or(o.MaxFileBytes, DefaultMaxFileBytes)
	o.MaxLines = cmp.Or(o.MaxLines, DefaultMaxLines)
	o.CompletionWindow = cmp.Or(o.CompletionWindow, DefaultCompletionWindow)
	if o.Owner == nil {
		o.Owner = func(context.Context) Owner { return Owner{} }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	s := &Service{o: o, blobs: blobs{dir: o.Dir}, wake: make(chan struct{}, 1)}
	s.blobs.sweep(o.Now().Add(-staleAfter))
	return s, nil
}

// staleAfter is the age past which a temporary file in the data
// directory is taken for one a crash left behind (an upload or an output
// file being written), and removed at start. Replicas share the directory,
// so a younger one may be another's, still being written.
const staleAfter = 24 * time.Hour

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ServeHTTP serves /v1/files and /v1/batches and the paths under them.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	owner := s.o.Owner(r.Context())
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/v1/"), "/"), "/")
	var err error
	switch {
	case parts[0] == "files" && len(parts) == 1:
		err = s.methods(w, r, map[string]handler{http.MethodGet: s.listFiles, http.MethodPost: s.upload}, owner, "")
	case parts[0] == "files" && len(parts) == 2:
		err = s.methods(w, r, map[string]handler{http.MethodGet: s.getFile, http.MethodDelete: s.deleteFile}, owner, parts[1])
	case parts[0] == "files" && len(parts) == 3 && parts[2] == "content":
		err = s.methods(w, r, map[string]handler{http.MethodGet: s.fileContent}, owner, parts[1])
	case parts[0] == "batches" && len(parts) == 1:
		err = s.methods(w, r, map[string]handler{http.MethodGet: s.listBatches, http.MethodPost: s.createBatch}, owner, "")
	case parts[0] == "batches" && len(parts) == 2:
		err = s.methods(w, r, map[string]handler{http.MethodGet: s.getBatch}, owner, parts[1])
	case parts[0] == "batches" && len(parts) == 3 && parts[2] == "cancel":
		err = s.methods(w, r, map[string]handler{http.MethodPost: s.cancelBatch}, owner, parts[1])
	default:
		err = &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "not_found",
			message: "Invalid URL (" + r.Method + " " + r.URL.EscapedPath() + ")"}
	}
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		s.o.Logger.Warn("batch API failed", "path", r.URL.Path, "err", err)
		ae = errInternal
	}
	writeError(w, ae)
}

type handler func(w http.ResponseWriter, r *http.Request, owner Owner, id string) error

func (s *Service) methods(w http.ResponseWriter, r *http.Request, hs map[string]handler, owner Owner, id string) error {
	h, ok := hs[r.Method]
	if !ok && r.Method == http.MethodHead {
		h, ok = hs[http.MethodGet]
	}
	if !ok {
		allow := make([]string, 0, len(hs))
		for m := range hs {
			allow = append(allow, m)
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest, code: "method_not_allowed",
			message: "method not allowed on this route"}
	}
	return h(w, r, owner, id)
}

// ownFile returns owner's file id; another tenant's, or an expired one,
// is not found.
func (s *Service) ownFile(ctx context.Context, owner Owner, id, param string) (FileMeta, error) {
	f, err := s.o.Store.File(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && (f.Owner != owner.Tenant || f.expired(s.o.Now()))) {
		return FileMeta{}, notFound("File", param, id)
	}
	return f, err
}

func (s *Service) ownBatch(ctx context.Context, owner Owner, id string) (BatchMeta, error) {
	b, err := s.o.Store.Batch(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && b.Owner != owner.Tenant) {
		return BatchMeta{}, notFound("Batch", "batch_id", id)
	}
	return b, err
}

func (s *Service) getFile(w http.ResponseWriter, r *http.Request, owner Owner, id string) error {
	f, err := s.ownFile(r.Context(), owner, id, "file_id")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toFileObject(f))
	return nil
}

func (s *Service) fileContent(w http.ResponseWriter, r *http.Request, owner Owner, id string) error {
	f, err := s.ownFile(r.Context(), owner, id, "file_id")
	if err != nil {
		return err
	}
	c, err := s.blobs.open(f.ID)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.ID, err)
	}
	defer c.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+strings.ReplaceAll(f.Filename, `"`, "")+`"`)
	http.ServeContent(&rangeErrors{ResponseWriter: w}, r, "", time.Unix(f.CreatedAt, 0), c)
	return nil
}

// rangeErrors turns http.ServeContent's plain-text 416 (a Range header
// past the file's end, or not one) into the API's JSON error.
type rangeErrors struct {
	http.ResponseWriter
	failed bool
}

func (w *rangeErrors) WriteHeader(code int) {
	if code != http.StatusRequestedRangeNotSatisfiable {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.failed = true
	msg := "The Range header is not a valid byte range."
	if cr := w.Header().Get("Content-Range"); cr != "" { // bytes */SIZE
		msg = "The Range header names no bytes of this file (" + strings.TrimPrefix(cr, "bytes */") + " bytes)."
	}
	writeError(w.ResponseWriter, &apiError{status: code, typ: typeInvalidRequest, param: "Range", code: "invalid_range", message: msg})
}

func (w *rangeErrors) Write(b []byte) (int, error) {
	if w.failed {
		return len(b), nil // ServeContent's own text: the JSON error went instead
	}
	return w.ResponseWriter.Write(b)
}

func (s *Service) deleteFile(w http.ResponseWriter, r *http.Request, owner Owner, id string) error {
	ctx := r.Context()
	f, err := s.ownFile(ctx, owner, id, "file_id")
	if err != nil {
		return err
	}
	active, err := s.o.Store.Active(ctx)
	if err != nil {
		return err
	}
	for _, b := range active {
		if b.InputFileID == f.ID {
			return badRequest("file_id", "file_in_use",
				"File %s is the input of batch %s, which has not ended; cancel the batch first.", f.ID, b.ID)
		}
	}
	if err := s.o.Store.DeleteFile(ctx, f.ID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err := s.blobs.remove(f.ID); err != nil {
		s.o.Logger.Warn("removing a deleted file's contents", "file", f.ID, "err", err)
	}
	writeJSON(w, http.StatusOK, fileDeleted{ID: f.ID, Object: "file", Deleted: true})
	return nil
}

// page reads the list parameters limit (1..max, default def) and after.
func page(r *http.Request, def, maxLimit int) (limit int, after string, err error) {
	q := r.URL.Query()
	limit = def
	if v := q.Get("limit"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > maxLimit {
			return 0, "", badRequest("limit", "invalid_value", "limit must be an integer from 1 to %d, got %q", maxLimit, echo(v))
		}
		limit = n
	}
	return limit, q.Get("after"), nil
}

// cut returns the page of items (already in list order) after the one
// with ID after, at most limit long, and whether more follow. An after
// that names no listed item (deleted, or another's) is a 400: listing from
// the start again gave a client that deletes as it pages the same items
// again, or a loop.
func cut[T any](items []T, id func(T) string, after, kind string, limit int) ([]T, bool, error) {
	if after != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == after })
		if i < 0 {
			return nil, false, badRequest("after", "invalid_value", "No %s with id %q to list after: it does not exist or was deleted.", kind, echo(after))
		}
		items = items[i+1:]
	}
	if len(items) > limit {
		return items[:limit], true, nil
	}
	return items, false, nil
}

func writeList[T any](w http.ResponseWriter, data []T, id func(T) string, more bool) {
	l := listObject[T]{Object: "list", Data: data, HasMore: more}
	if l.Data == nil {
		l.Data = []T{}
	}
	if len(data) > 0 {
		first, last := id(data[0]), id(data[len(data)-1])
		l.FirstID, l.LastID = &first, &last
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Service) listFiles(w http.ResponseWriter, r *http.Request, owner Owner, _ string) error {
	limit, after, err := page(r, 10_000, 10_000)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	order := cmp.Or(q.Get("order"), "desc")
	if order != "asc" && order != "desc" {
		return badRequest("order", "invalid_value", "order must be asc or desc, got %q", echo(order))
	}
	files, err := s.o.Store.Files(r.Context(), owner.Tenant)
	if err != nil {
		return err
	}
	slices.SortFunc(files, func(a, b FileMeta) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	if order == "desc" {
		slices.Reverse(files)
	}
	// The page starts after the cursor among the files not yet swept, so
	// a client paging while its cursor expires goes on (it got a 400).
	if after != "" {
		i := slices.IndexFunc(files, func(f FileMeta) bool { return f.ID == after })
		if i < 0 {
			return badRequest("after", "invalid_value", "No file with id %q to list after: it does not exist, or was deleted or expired.", echo(after))
		}
		files = files[i+1:]
	}
	now, purpose := s.o.Now(), q.Get("purpose")
	files = slices.DeleteFunc(files, func(f FileMeta) bool { return f.expired(now) || purpose != "" && f.Purpose != purpose })
	id := func(f fileObject) string { return f.ID }
	objs := make([]fileObject, len(files))
	for i, f := range files {
		objs[i] = toFileObject(f)
	}
	data, more, err := cut(objs, id, "", "file", limit)
	if err != nil {
		return err
	}
	writeList(w, data, id, more)
	return nil
}

func (s *Service) listBatches(w http.ResponseWriter, r *http.Request, owner Owner, _ string) error {
	limit, after, err := page(r, 20, 100)
	if err != nil {
		return err
	}
	ctx := r.Context()
	bs, err := s.o.Store.Batches(ctx, owner.Tenant)
	if err != nil {
		return err
	}
	slices.SortFunc(bs, func(a, b BatchMeta) int { // newest first
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	data, more, err := cut(bs, func(b BatchMeta) string { return b.ID }, after, "batch", limit)
	if err != nil {
		return err
	}
	objs := make([]batchObject, len(data))
	for i, b := range data {
		if objs[i], err = s.object(ctx, b); err != nil {
			return err
		}
	}
	writeList(w, objs, func(b batchObject) string { return b.ID }, more)
	return nil
}

// object is b as the API shows it, with its live counts while it runs.
func (s *Service) object(ctx context.Context, b BatchMeta) (batchObject, error) {
	c := b.Counts
	if !b.Status.Terminal() && b.Status != StatusValidating {
		live, err := s.o.Store.Counts(ctx, b.ID, s.o.Now())
		if err != nil {
			return batchObject{}, err
		}
		c = Counts{Total: b.Total, Completed: live.Completed, Failed: live.Failed}
	}
	return toBatchObject(b, c), nil
}

func (s *Service) getBatch(w http.ResponseWriter, r *http.Request, owner Owner, id string) error {
	b, err := s.ownBatch(r.Context(), owner, id)
	if err != nil {
		return err
	}
	obj, err := s.object(r.Context(), b)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

// maxBatchRequest bounds the body of POST /v1/batches.
const maxBatchRequest = 64 << 10

func (s *Service) createBatch(w http.ResponseWriter, r *http.Request, owner Owner, _ string) error {
	ctx := r.Context()
	var req batchRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBatchRequest))
	// OpenAI refuses a parameter it does not know rather than ignore it
	// (a misspelt one did nothing here), and one object is the body.
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("data after the object")
	}
	if err != nil {
		var typeErr *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return badRequest(name, "unknown_parameter", "Unrecognized request argument supplied: %s", echo(name))
		}
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			// Named by the request's field and JSON's types, not this
			// package's Go ones.
			return badRequest(typeErr.Field, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.",
				typeErr.Field, jsonscan.TypeName(typeErr.Type), jsonscan.ValueName(typeErr.Value))
		case errors.As(err, &tooBig):
			return badRequest("", "invalid_json", "The request body is over %d bytes.", maxBatchRequest)
		}
		return badRequest("", "invalid_json", "We could not parse the JSON body of your request. The body must be a JSON object.")
	}
	switch {
	case req.InputFileID == "":
		return badRequest("input_file_id", "missing_required_parameter", "Missing required parameter: 'input_file_id'.")
	case req.Endpoint == "":
		return badRequest("endpoint", "missing_required_parameter", "Missing required parameter: 'endpoint'.")
	case !knownEndpoint(req.Endpoint):
		return badRequest("endpoint", "invalid_value", "endpoint %q is not one of %s", echo(req.Endpoint),
			strings.Join(Endpoints(), ", "))
	case req.CompletionWindow == "":
		return badRequest("completion_window", "missing_required_parameter", "Missing required parameter: 'completion_window'.")
	case req.CompletionWindow != "24h":
		return badRequest("completion_window", "invalid_value", "completion_window must be \"24h\", got %q", echo(req.CompletionWindow))
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return err
	}
	var outputExpiry int64
	if req.OutputExpiresAfter != nil {
		var err error
		if outputExpiry, err = req.OutputExpiresAfter.check("output_expires_after"); err != nil {
			return err
		}
	}
	if owner.NoFlex {
		return badRequest("", "flex_not_allowed",
			"Batch requests run in the flex service class, which your tier does not include.")
	}
	f, err := s.ownFile(ctx, owner, req.InputFileID, "input_file_id")
	if err != nil {
		return err
	}
	if f.Purpose != PurposeBatch {
		return badRequest("input_file_id", "invalid_value",
			"File %s has purpose %q; a batch's input is a file uploaded with purpose \"batch\".", f.ID, f.Purpose)
	}
	// A batch's output and error files are written whatever the cap (the
	// fleet's work is never thrown away), so the cap is checked here: a
	// tenant whose files, outputs included, are at or over it creates no
	// more batches (creates went on, and their outputs past the cap). The
	// tenant may still pass it by the outputs of the batches it has
	// running.
	held, err := s.tenantBytes(ctx, owner.Tenant)
	if err != nil {
		return err
	}
	if err := s.overStorage(held, 0, "", "create batches"); err != nil {
		return err
	}
	now := s.o.Now()
	b := BatchMeta{ID: newID("batch_"), Owner: owner.Tenant, Tier: owner.Tier, Endpoint: req.Endpoint,
		InputFileID: f.ID, CompletionWindow: req.CompletionWindow, Metadata: req.Metadata,
		Status: StatusValidating, DefaultMaxTokens: owner.DefaultMaxTokens, OutputExpiry: outputExpiry,
		CreatedAt: now.Unix(), ExpiresAt: now.Add(s.o.CompletionWindow).Unix()}
	if err := s.o.Store.CreateBatch(ctx, b); err != nil {
		return err
	}
	s.poke()
	writeJSON(w, http.StatusOK, toBatchObject(b, Counts{}))
	return nil
}

// checkMetadata applies OpenAI's bounds: 16 pairs, keys up to 64
// characters, values up to 512.
func checkMetadata(m map[string]string) error {
	if len(m) > 16 {
		return badRequest("metadata", "invalid_value", "metadata may hold at most 16 pairs, got %d", len(m))
	}
	for k, v := range m {
		if len(k) > 64 || len(v) > 512 {
			return badRequest("metadata", "invalid_value", "metadata keys may be 64 characters long and values 512; %q is longer", echo(k))
		}
	}
	return nil
}

// errNotCancellable is UpdateBatch's abort for a batch that has ended.
type errNotCancellable struct{ status Status }

func (e *errNotCancellable) Error() string { return "batch is " + string(e.status) }

func (s *Service) cancelBatch(w http.ResponseWriter, r *http.Request, owner Owner, id string) error {
	ctx := r.Context()
	if _, err := s.ownBatch(ctx, owner, id); err != nil {
		return err
	}
	now := s.o.Now().Unix()
	b, err := s.o.Store.UpdateBatch(ctx, id, func(b *BatchMeta) error {
		switch b.Status {
		case StatusValidating, StatusInProgress:
			b.Status, b.CancellingAt = StatusCancelling, now
		case StatusCancelling, StatusCancelled:
		default:
			return &errNotCancellable{status: b.Status}
		}
		return nil
	})
	var nc *errNotCancellable
	if errors.As(err, &nc) {
		return badRequest("batch_id", "invalid_state", "Cannot cancel a batch with status %q.", nc.status)
	}
	if err != nil {
		return err
	}
	s.poke()
	obj, err := s.object(ctx, b)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}
