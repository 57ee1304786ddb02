package gpuworker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Faults are failures a Worker injects on purpose, so tests and benchmarks
// can make a live worker slow, failing, stalled or dead. The zero value
// injects nothing. Set them with Options.Faults or, on a running worker,
// with PUT /admin/faults or SetFaults; each setting replaces the previous
// one whole.
type Faults struct {
	// ErrorRate is the fraction (0..1) of chat and completion requests
	// answered with ErrorStatus at once, before any work. Which requests
	// fail is fixed by Options.Seed and the order of arrival.
	ErrorRate float64
	// ErrorStatus is the HTTP status of injected errors, 500..599; zero
	// means 500.
	ErrorStatus int
	// AddedLatency delays every chat and completion response before it
	// starts (before the engine sees the request), in wall-clock time,
	// regardless of Options.Speedup.
	AddedLatency time.Duration
	// StallAfter, when positive, makes every generation hang after that
	// many output tokens: a stream sends them (across all its choices) and
	// then nothing more, and a non-streaming request never answers; both
	// wait until the client leaves or the worker stops.
	StallAfter int
	// CrashAfter, when positive, makes the worker crash once it has
	// received that many /v1 requests since these faults were set: the
	// next /v1 request, and from then on every request except /admin/*,
	// aborts its connection without a response (panic(http.ErrAbortHandler)),
	// streams in flight are cut the same way, and /health fails. A library
	// handler cannot close its listener, so this is how the crash shows;
	// cmd/gpuworker also closes the server (see Options.OnCrash). Setting
	// new faults revives a crashed worker.
	CrashAfter int
}

// Validate reports the first field with an invalid value, naming it by its
// JSON name.
func (f Faults) Validate() error {
	var errs []error
	if math.IsNaN(f.ErrorRate) || f.ErrorRate < 0 || f.ErrorRate > 1 {
		errs = append(errs, &FaultError{Field: "error_rate", Reason: fmt.Sprintf("must be in [0, 1], got %v", f.ErrorRate)})
	}
	if f.ErrorStatus != 0 && (f.ErrorStatus < 500 || f.ErrorStatus > 599) {
		errs = append(errs, &FaultError{Field: "error_status", Reason: fmt.Sprintf("must be in [500, 599], got %d", f.ErrorStatus)})
	}
	if f.AddedLatency < 0 {
		errs = append(errs, &FaultError{Field: "added_latency", Reason: fmt.Sprintf("must not be negative, got %v", f.AddedLatency)})
	}
	if f.StallAfter < 0 {
		errs = append(errs, &FaultError{Field: "stall_after", Reason: fmt.Sprintf("must not be negative, got %d", f.StallAfter)})
	}
	if f.CrashAfter < 0 {
		errs = append(errs, &FaultError{Field: "crash_after", Reason: fmt.Sprintf("must not be negative, got %d", f.CrashAfter)})
	}
	return errors.Join(errs...)
}

// FaultError names a Faults field with a bad value.
type FaultError struct {
	Field  string // JSON name, as in "error_rate"
	Reason string
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("gpuworker: faults: %s %s", e.Field, e.Reason)
}

// faultState is one immutable Faults setting with the counters it started.
type faultState struct {
	f        Faults
	requests atomic.Int64 // /v1 requests seen under this setting
}

// crashLatch closes once when the worker crashes. It is replaced only after
// it closed (when new faults revive the worker), so a request that loaded
// an open latch sees the next crash.
type crashLatch struct {
	ch   chan struct{}
	once sync.Once
}

func newCrashLatch() *crashLatch { return &crashLatch{ch: make(chan struct{})} }

func (l *crashLatch) crashed() bool {
	select {
	case <-l.ch:
		return true
	default:
		return false
	}
}

// Faults returns the faults in force.
func (w *Worker) Faults() Faults { return w.faults.Load().f }

// SetFaults replaces the faults in force, restarts the CrashAfter count and
// revives a crashed worker.
func (w *Worker) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	w.faults.Store(&faultState{f: f})
	if w.latch.Load().crashed() {
		w.latch.Store(newCrashLatch())
	}
	return nil
}

// crash trips the latch and calls Options.OnCrash, once per crash.
func (w *Worker) crash(l *crashLatch) {
	l.once.Do(func() {
		close(l.ch)
		if w.onCrash != nil {
			w.onCrash()
		}
	})
}

// crashGate aborts every request while the worker is crashed.
func (w *Worker) crashGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.latch.Load().crashed() && !strings.HasPrefix(r.URL.Path, "/admin/") {
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(rw, r)
	})
}

// countCrash counts a /v1 request toward CrashAfter and crashes the worker
// when it is one too many.
func (w *Worker) countCrash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fs := w.faults.Load()
		if n := fs.f.CrashAfter; n > 0 && fs.requests.Add(1) > int64(n) {
			w.crash(w.latch.Load())
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(rw, r)
	})
}

// injectErrors answers a share of generation requests with an injected
// error, before any work.
func (w *Worker) injectErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		f := w.faults.Load().f
		if f.ErrorRate > 0 && w.roll() < f.ErrorRate {
			status := f.ErrorStatus
			if status == 0 {
				status = http.StatusInternalServerError
			}
			writeError(rw, &apiError{status: status, message: "gpuworker: injected fault", typ: "server_error", code: "injected_fault"})
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// addLatency waits out Faults.AddedLatency. It runs after the body is read,
// so that the server notices a client that leaves meanwhile. It reports
// whether to go on; if not, it has answered (or the client is gone).
func (w *Worker) addLatency(ctx context.Context, rw http.ResponseWriter, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	if err := w.hold(ctx, t.C); err != nil {
		if errors.Is(err, ErrStopped) {
			writeError(rw, err)
		}
		return false
	}
	return true
}

// hold waits for until (nil: forever). It returns nil when until fires,
// ctx's error when the client leaves and ErrStopped when Run stops; it
// aborts the connection if the worker crashes meanwhile.
func (w *Worker) hold(ctx context.Context, until <-chan time.Time) error {
	latch := w.latch.Load()
	select {
	case <-until:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return ErrStopped
	case <-latch.ch:
		panic(http.ErrAbortHandler)
	}
}

// roll returns the next pseudo-random number in [0, 1) of the worker's
// fault stream, fixed by Options.Seed.
func (w *Worker) roll() float64 {
	n := w.rolls.Add(1)
	return float64(mix(uint64(w.seed)^mix(n))>>11) / (1 << 53)
}
