package batch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// errSkip aborts an UpdateBatch whose batch is not in the state the
// change expects (another runner got there first).
var errSkip = errors.New("batch: skipped")

// finalize writes b's output and error files and ends it with ending. It
// first takes the batch for LeaseTTL, so that one runner finalizes it, and
// another takes over if this one dies doing it.
func (r *Runner) finalize(ctx context.Context, b BatchMeta, ending Status, now time.Time) error {
	until := now.Add(r.o.LeaseTTL).UnixMilli()
	b, err := r.s.o.Store.UpdateBatch(ctx, b.ID, func(m *BatchMeta) error {
		switch {
		case m.Status == StatusInProgress:
			m.Status, m.FinalizingAt = StatusFinalizing, now.Unix()
		case m.Status == StatusCancelling:
			// it stays cancelling until cancelled, as at OpenAI
		case m.Status == StatusFinalizing && m.FinalizeUntil < now.UnixMilli():
		default:
			return errSkip
		}
		m.Ending, m.Finalizer, m.FinalizeUntil = ending, r.o.Holder, until
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	var w written
	if b.Total > 0 {
		if w, err = r.writeFiles(ctx, b, ending); err != nil {
			return err // the claim on finalizing expires and it is tried again
		}
	}
	end := r.s.o.Now().Unix()
	_, err = r.s.o.Store.UpdateBatch(ctx, b.ID, func(m *BatchMeta) error {
		if m.Finalizer != r.o.Holder {
			return errSkip
		}
		m.Status, m.Ending, m.Finalizer, m.FinalizeUntil = ending, "", "", 0
		m.OutputFileID, m.ErrorFileID, m.Counts = w.output, w.errors, w.counts
		m.Counts.Total = m.Total
		if m.Total > 0 {
			m.Usage = &w.usage
		}
		switch ending {
		case StatusCompleted:
			m.CompletedAt = end
		case StatusExpired:
			m.ExpiredAt = end
		case StatusCancelled:
			m.CancelledAt = end
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	r.dropInput(b.ID)
	return r.s.o.Store.DropLines(ctx, b.ID)
}

// written is what writeFiles wrote.
type written struct {
	output, errors string
	counts         Counts
	usage          Usage
}

// fileIDs are the IDs of a batch's output and error files: fixed by the
// batch's ID, so that a finalizing taken over writes the same files.
func fileIDs(batchID string) (output, errs string) {
	s := strings.TrimPrefix(batchID, "batch_")
	return "file-" + s + "-output", "file-" + s + "-errors"
}

// writeFiles writes the results so far: answers with a 2xx status to the
// output file, the others to the error file, and for an expired batch
// each line that never ran, as batch_expired. A file with no line is not
// written.
func (r *Runner) writeFiles(ctx context.Context, b BatchMeta, ending Status) (written, error) {
	var w written
	outID, errID := fileIDs(b.ID)
	out, err := r.s.blobs.create(outID)
	if err != nil {
		return w, err
	}
	defer out.abort()
	errs, err := r.s.blobs.create(errID)
	if err != nil {
		return w, err
	}
	defer errs.abort()
	seen := make([]bool, b.Total)
	write := func(to *blobWriter, l outputLine) error {
		l.ID = newID("batch_req_")
		enc, err := json.Marshal(l)
		if err != nil {
			return err
		}
		return to.line(enc)
	}
	err = r.s.o.Store.Results(ctx, b.ID, func(line int, res Result) error {
		if line >= 0 && line < len(seen) {
			seen[line] = true
		}
		l := outputLine{CustomID: res.CustomID}
		if res.Status == 0 {
			l.Error = &outputError{Code: res.ErrCode, Message: res.ErrMessage}
		} else {
			l.Response = &outputResponse{StatusCode: res.Status, RequestID: res.RequestID, Body: res.Body}
		}
		w.usage.Input += res.Input
		w.usage.Output += res.Output
		if res.OK() {
			w.counts.Completed++
			return write(out, l)
		}
		w.counts.Failed++
		return write(errs, l)
	})
	if err != nil {
		return w, err
	}
	if ending == StatusExpired {
		in, err := r.input(b)
		if err != nil {
			return w, err
		}
		for i, sp := range in.index {
			if seen[i] {
				continue
			}
			raw := make([]byte, sp.n)
			if _, err := in.f.ReadAt(raw, sp.off); err != nil {
				return w, err
			}
			var line inputLine
			_ = json.Unmarshal(raw, &line) // validated when the batch started
			l := outputLine{Error: &outputError{Code: "batch_expired",
				Message: "This request could not be executed before the completion window expired."}}
			if line.CustomID != nil {
				l.CustomID = *line.CustomID
			}
			w.counts.Failed++
			if err := write(errs, l); err != nil {
				return w, err
			}
		}
	}
	now := r.s.o.Now().Unix()
	for _, f := range []struct {
		bw   *blobWriter
		id   string
		name string
		to   *string
	}{{out, outID, "output", &w.output}, {errs, errID, "errors", &w.errors}} {
		if f.bw.n == 0 {
			continue
		}
		if err := f.bw.commit(); err != nil {
			return w, err
		}
		meta := FileMeta{ID: f.id, Owner: b.Owner, Filename: b.ID + "_" + f.name + ".jsonl",
			Purpose: PurposeBatchOutput, Bytes: f.bw.size, CreatedAt: now}
		if b.OutputExpiry > 0 {
			meta.ExpiresAt = now + b.OutputExpiry
		}
		if err := r.s.o.Store.SaveFile(ctx, meta); err != nil {
			return w, err
		}
		*f.to = f.id
	}
	return w, nil
}
