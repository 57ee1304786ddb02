package batch

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is a Store's answer for a file or batch it does not hold.
var ErrNotFound = errors.New("batch: not found")

// Store keeps file metadata, batch state and per-line progress. Every
// method is safe for concurrent use; several runners (replicas) may share
// one Store.
//
// Lines are numbered from 0. A line is pending until a runner claims it;
// a claim lasts ttl unless renewed, after which the line is pending again
// (its runner is presumed dead). Finish records a line's result once: the
// first result wins and later ones are dropped, so a line whose claim
// expired while it ran is never counted twice.
type Store interface {
	SaveFile(ctx context.Context, f FileMeta) error
	File(ctx context.Context, id string) (FileMeta, error)
	// Files lists owner's files, in any order.
	Files(ctx context.Context, owner string) ([]FileMeta, error)
	DeleteFile(ctx context.Context, id string) error
	// ExpiredFiles lists every owner's files whose ExpiresAt is at or
	// before now, in any order.
	ExpiredFiles(ctx context.Context, now time.Time) ([]FileMeta, error)

	// CreateBatch stores a new batch.
	CreateBatch(ctx context.Context, b BatchMeta) error
	Batch(ctx context.Context, id string) (BatchMeta, error)
	// Batches lists owner's batches, in any order.
	Batches(ctx context.Context, owner string) ([]BatchMeta, error)
	// Active lists every batch that is not terminal, in any order.
	Active(ctx context.Context) ([]BatchMeta, error)
	// UpdateBatch applies change to the batch atomically and returns the
	// result. An error from change aborts the update and is returned as
	// is.
	UpdateBatch(ctx context.Context, id string, change func(*BatchMeta) error) (BatchMeta, error)

	// StartLines makes lines 0..n-1 of the batch pending. Calling it again
	// changes nothing.
	StartLines(ctx context.Context, id string, n int) error
	// Claim claims up to max pending lines for holder until now+ttl.
	Claim(ctx context.Context, id, holder string, max int, ttl time.Duration, now time.Time) ([]int, error)
	// Renew extends holder's claims on lines to now+ttl; lines it no
	// longer holds are left alone.
	Renew(ctx context.Context, id, holder string, lines []int, ttl time.Duration, now time.Time) error
	// Release gives a claimed line back, pending again at once.
	Release(ctx context.Context, id, holder string, line int) error
	// Finish records line's result, once: it reports false when the line
	// had one already.
	Finish(ctx context.Context, id string, line int, r Result) (bool, error)
	// Counts reports the lines' progress; Claimed counts claims unexpired
	// at now.
	Counts(ctx context.Context, id string, now time.Time) (Counts, error)
	// Results calls fn with each recorded result, in any order.
	Results(ctx context.Context, id string, fn func(line int, r Result) error) error
	// DropLines forgets the batch's line progress (its results are in its
	// files by then).
	DropLines(ctx context.Context, id string) error
}
