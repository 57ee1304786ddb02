package batch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// multipartSlack is what a multipart upload may add to the file's own
// bytes (boundaries, headers, the purpose field).
const multipartSlack = 64 << 10

// upload serves POST /v1/files: a multipart form with the file and its
// purpose, which must be "batch". The file is streamed to the data
// directory, never held in memory.
func (s *Service) upload(w http.ResponseWriter, r *http.Request, owner Owner, _ string) (err error) {
	limit := s.o.MaxFileBytes
	if r.ContentLength > limit+multipartSlack {
		return tooLarge(limit)
	}
	held, err := s.tenantBytes(r.Context(), owner.Tenant)
	if err != nil {
		return err
	}
	if err := s.overStorage(held, 0, "file", "upload more"); err != nil {
		return err // before a byte is read
	}
	pace := &paced{r: r.Body, rc: http.NewResponseController(w), idle: s.o.UploadIdle}
	r.Body = http.MaxBytesReader(w, pace, limit+multipartSlack)
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("file", "invalid_request", "Upload the file as multipart/form-data with fields file and purpose.")
	}
	var (
		purpose, filename, id string
		size                  int64
		lines                 int
		expiry                expiresAfter // expires_after[anchor], expires_after[seconds]
	)
	defer func() {
		if err != nil && id != "" {
			_ = s.blobs.remove(id)
		}
	}()
	for {
		part, perr := mr.NextPart()
		if errors.Is(perr, io.EOF) {
			break
		}
		if perr != nil {
			return uploadError(perr, limit, s.o.UploadIdle)
		}
		switch part.FormName() {
		case "purpose":
			if purpose, err = formValue(part, "purpose", limit, s.o.UploadIdle); err != nil {
				return err
			}
		case "expires_after[anchor]", "expires_after[seconds]":
			param := "expires_after." + strings.TrimSuffix(strings.TrimPrefix(part.FormName(), "expires_after["), "]")
			v, verr := formValue(part, param, limit, s.o.UploadIdle)
			if verr != nil {
				return verr
			}
			if part.FormName() == "expires_after[anchor]" {
				expiry.Anchor = &v
				break
			}
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				return badRequest("expires_after.seconds", "invalid_type", "expires_after.seconds must be an integer, got %q", echo(v))
			}
			expiry.Seconds = &n
		case "file":
			if id != "" {
				return badRequest("file", "invalid_request", "Upload one file per request.")
			}
			id = newID("file-")
			filename = filepath.Base(part.FileName())
			if size, lines, err = s.blobs.put(id, part, limit); err != nil {
				return uploadError(err, limit, s.o.UploadIdle)
			}
		default:
			if _, derr := io.Copy(io.Discard, part); derr != nil {
				return uploadError(derr, limit, s.o.UploadIdle)
			}
		}
	}
	_ = pace.rc.SetReadDeadline(time.Time{}) // read whole: the connection may serve the next request
	switch {
	case id == "":
		return badRequest("file", "missing_required_parameter", "Missing required parameter: 'file'.")
	case purpose == "":
		return badRequest("purpose", "missing_required_parameter", "Missing required parameter: 'purpose'.")
	case purpose != PurposeBatch:
		return badRequest("purpose", "invalid_value", "purpose must be \"batch\": this server keeps files for the Batch API only; got %q", echo(purpose))
	case lines > s.o.MaxLines:
		return badRequest("file", "too_many_requests_in_file",
			"The file has %d requests; a batch input file may have at most %d.", lines, s.o.MaxLines)
	}
	var keep int64 // seconds
	if expiry.Anchor != nil || expiry.Seconds != nil {
		if keep, err = expiry.check("expires_after"); err != nil {
			return err
		}
	} else if s.o.FileExpiry > 0 {
		keep = int64(max(s.o.FileExpiry/time.Second, 1))
	}
	if filename == "" || filename == "." || filename == "/" {
		filename = "upload.jsonl"
	}
	f := FileMeta{ID: id, Owner: owner.Tenant, Filename: filename, Purpose: purpose, Bytes: size,
		CreatedAt: s.o.Now().Unix()}
	if keep > 0 {
		f.ExpiresAt = f.CreatedAt + keep
	}
	if err = s.save(r.Context(), f); err != nil {
		return err // the deferred remove drops the blob
	}
	writeJSON(w, http.StatusOK, toFileObject(f))
	return nil
}

// save stores an uploaded file unless it would take its tenant past
// MaxTenantBytes, counting what the tenant holds as it saves: the count
// read as the upload began let ten uploads running at once through a cap
// that took two. Saves are one at a time in this process; replicas sharing
// a Store may each save one past the cap at the same instant.
func (s *Service) save(ctx context.Context, f FileMeta) error {
	s.saving.Lock()
	defer s.saving.Unlock()
	held, err := s.tenantBytes(ctx, f.Owner)
	if err != nil {
		return err
	}
	if err := s.overStorage(held, f.Bytes, "file", "upload more"); err != nil {
		return err
	}
	return s.o.Store.SaveFile(ctx, f)
}

// maxFormValue bounds a form field other than the file.
const maxFormValue = 64

// formValue reads a form field's value, trimmed; one longer than
// maxFormValue is a 400 naming param (it was cut there, and what was left
// taken for the value).
func formValue(part io.Reader, param string, limit int64, idle time.Duration) (string, error) {
	b, err := io.ReadAll(io.LimitReader(part, maxFormValue+1))
	if err != nil {
		return "", uploadError(err, limit, idle)
	}
	if len(b) > maxFormValue {
		return "", badRequest(param, "invalid_value", "%s is longer than %d bytes.", param, maxFormValue)
	}
	return strings.TrimSpace(string(b)), nil
}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, param: "file", code: "file_too_large",
		message: "The file is larger than the limit of " + formatBytes(limit) + "."}
}

// uploadError names what went wrong reading an upload: too large, or a
// body that is not a well-formed multipart form.
func uploadError(err error, limit int64, idle time.Duration) error {
	var mb *http.MaxBytesError
	if errors.Is(err, errTooLarge) || errors.As(err, &mb) {
		return tooLarge(limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &apiError{status: http.StatusRequestTimeout, typ: typeInvalidRequest, code: "request_timeout",
			message: "The upload stalled: it must bring " + formatBytes(UploadStep) + " at least every " + idle.String() + "."}
	}
	var we *diskError
	if errors.As(err, &we) {
		return err // the server's fault: a 500, logged
	}
	return badRequest("file", "invalid_request", "The upload could not be read as multipart/form-data.")
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// UploadStep is what an upload must bring within each Options.UploadIdle.
const UploadStep = 64 << 10

// DefaultUploadIdle is Options.UploadIdle's default.
const DefaultUploadIdle = 30 * time.Second

// paced reads an upload under a read deadline that moves UploadIdle on
// each time UploadStep bytes have come: a stalled upload (one byte every
// few seconds) ends, where one without a deadline held its socket and its
// temporary file for good (one key held 9,850 such uploads, near the
// process's open-file limit).
type paced struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	armed bool
	got   int64 // since the deadline last moved
}

func (p *paced) Read(b []byte) (int, error) {
	if !p.armed {
		p.armed = true
		_ = p.rc.SetReadDeadline(time.Now().Add(p.idle))
	}
	n, err := p.r.Read(b)
	if p.got += int64(n); p.got >= UploadStep {
		p.got = 0
		_ = p.rc.SetReadDeadline(time.Now().Add(p.idle))
	}
	return n, err
}

func (p *paced) Close() error {
	if c, ok := p.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// tenantBytes is what tenant's files hold, when a cap applies.
func (s *Service) tenantBytes(ctx context.Context, tenant string) (int64, error) {
	if s.o.MaxTenantBytes <= 0 {
		return 0, nil
	}
	files, err := s.o.Store.Files(ctx, tenant)
	if err != nil {
		return 0, err
	}
	var n int64
	now := s.o.Now()
	for _, f := range files {
		if !f.expired(now) { // gone for its owner, deleted at the runner's next sweep
			n += f.Bytes
		}
	}
	return n, nil
}

// overStorage refuses a file of size beside held bytes past the tenant's
// cap (uploads had none: one key could fill the disk), or with size 0
// anything more once held is at the cap; the error names param and what
// deleting files lets the tenant do (to).
func (s *Service) overStorage(held, size int64, param, to string) error {
	if s.o.MaxTenantBytes <= 0 || held+size <= s.o.MaxTenantBytes && held < s.o.MaxTenantBytes {
		return nil
	}
	what := "Your files hold " + formatBytes(held) + " of the " + formatBytes(s.o.MaxTenantBytes) + " you may keep"
	if size > 0 {
		what += "; this upload of " + formatBytes(size) + " would pass it"
	}
	return badRequest(param, "storage_limit_exceeded", "%s. Delete files (DELETE /v1/files/{id}) to %s.", what, to)
}
