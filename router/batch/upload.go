package batch

import (
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
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
	r.Body = http.MaxBytesReader(w, r.Body, limit+multipartSlack)
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("file", "invalid_request", "Upload the file as multipart/form-data with fields file and purpose.")
	}
	var (
		purpose, filename, id string
		size                  int64
		lines                 int
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
			return uploadError(perr, limit)
		}
		switch part.FormName() {
		case "purpose":
			b, rerr := io.ReadAll(io.LimitReader(part, 64))
			if rerr != nil {
				return uploadError(rerr, limit)
			}
			purpose = strings.TrimSpace(string(b))
		case "file":
			if id != "" {
				return badRequest("file", "invalid_request", "Upload one file per request.")
			}
			id = newID("file-")
			filename = filepath.Base(part.FileName())
			if size, lines, err = s.blobs.put(id, part, limit); err != nil {
				return uploadError(err, limit)
			}
		default:
			if _, derr := io.Copy(io.Discard, part); derr != nil {
				return uploadError(derr, limit)
			}
		}
	}
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
	if filename == "" || filename == "." || filename == "/" {
		filename = "upload.jsonl"
	}
	f := FileMeta{ID: id, Owner: owner.Tenant, Filename: filename, Purpose: purpose, Bytes: size,
		CreatedAt: s.o.Now().Unix()}
	if err = s.o.Store.SaveFile(r.Context(), f); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toFileObject(f))
	return nil
}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, param: "file", code: "file_too_large",
		message: "The file is larger than the limit of " + formatBytes(limit) + "."}
}

// uploadError names what went wrong reading an upload: too large, or a
// body that is not a well-formed multipart form.
func uploadError(err error, limit int64) error {
	var mb *http.MaxBytesError
	if errors.Is(err, errTooLarge) || errors.As(err, &mb) {
		return tooLarge(limit)
	}
	var we *diskError
	if errors.As(err, &we) {
		return err // the server's fault: a 500, logged
	}
	return badRequest("file", "invalid_request", "The upload could not be read as multipart/form-data.")
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
