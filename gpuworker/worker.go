package gpuworker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrStopped is returned for work submitted after Run has returned.
var ErrStopped = errors.New("gpuworker: worker stopped")

// ErrAlreadyRunning is returned by a second concurrent call to Run.
var ErrAlreadyRunning = errors.New("gpuworker: Run already called")

// Options configures a Worker. Zero fields take the documented defaults.
type Options struct {
	// Model is the served model name; required.
	Model string
	// Profile names the built-in profile to simulate; default "instant".
	Profile string
	// Speedup makes simulated time run this many times faster than the
	// wall clock; 0 means 1.
	Speedup float64
	// Seed varies the pseudo-random output lengths and texts; default 0.
	Seed int64
}

// Worker is a simulated OpenAI-compatible inference server: an Engine driven
// by the wall clock (scaled by Speedup) behind an HTTP API with vLLM-style
// metrics. Handlers submit to the engine and wait on a per-request signal;
// the single Run goroutine steps the engine and wakes them. A Worker serves
// one lifetime: once Run returns, new requests fail with 503.
type Worker struct {
	model   string
	prof    Profile
	speedup float64
	seed    int64
	handler http.Handler
	wake    chan struct{}
	started atomic.Bool
	wall0   time.Time

	mu      sync.Mutex
	engine  *Engine
	pending map[uint64]pendingRef
	nextID  uint64
	stopped bool
	events  []Event
}

// job is one HTTP request's generation: one choice per prompt. Its choices
// are guarded by Worker.mu; notify (capacity 1) signals new progress.
type job struct {
	notify  chan struct{}
	choices []choice
	aborted bool
}

// choice tracks one engine request.
type choice struct {
	id     uint64
	prompt int
	max    int // max_tokens
	target int // tokens the engine will produce
	key    uint64
	tokens int
	done   bool
}

type pendingRef struct {
	job   *job
	index int
}

// New builds a Worker. It starts no goroutines; call Run to serve requests.
func New(opts Options) (*Worker, error) {
	if opts.Model == "" {
		return nil, errors.New("gpuworker: Options.Model is required")
	}
	if opts.Speedup < 0 {
		return nil, fmt.Errorf("gpuworker: Options.Speedup must not be negative, got %v", opts.Speedup)
	}
	name := opts.Profile
	if name == "" {
		name = InstantProfile
	}
	prof, err := LookupProfile(name)
	if err != nil {
		return nil, err
	}
	eng, err := NewEngine(prof)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		model:   opts.Model,
		prof:    prof,
		speedup: opts.Speedup,
		seed:    opts.Seed,
		wake:    make(chan struct{}, 1),
		wall0:   time.Now(),
		engine:  eng,
		pending: make(map[uint64]pendingRef),
	}
	if w.speedup == 0 {
		w.speedup = 1
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(w)); err != nil {
		return nil, fmt.Errorf("gpuworker: register metrics: %w", err)
	}
	w.handler = w.routes(reg)
	return w, nil
}

// Handler returns the worker's HTTP API.
func (w *Worker) Handler() http.Handler { return w.handler }

// Model returns the served model name.
func (w *Worker) Model() string { return w.model }

// Profile returns the simulated profile.
func (w *Worker) Profile() Profile { return w.prof }

// Load reports the engine's current load.
func (w *Worker) Load() Load {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.engine.Load()
}

// Run drives the engine until ctx is done, then fails the requests still in
// flight and returns nil. It is the only goroutine a Worker needs.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if wait, ok := w.advance(); ok {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			w.stop()
			return nil
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// virtualNow maps the wall clock to simulated time.
func (w *Worker) virtualNow() time.Time {
	elapsed := time.Since(w.wall0)
	if w.speedup != 1 {
		elapsed = time.Duration(float64(elapsed) * w.speedup)
	}
	return w.wall0.Add(elapsed)
}

// advance steps the engine to the present, delivers events and returns the
// wall-clock wait until the next step ends.
func (w *Worker) advance() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.virtualNow()
	w.events = w.engine.Step(now, w.events[:0])
	for _, ev := range w.events {
		ref, ok := w.pending[ev.ID]
		if !ok {
			continue
		}
		c := &ref.job.choices[ref.index]
		c.tokens = ev.Tokens
		if ev.Kind == EventFinished {
			c.done = true
			delete(w.pending, ev.ID)
		}
		signal(ref.job.notify)
	}
	next, ok := w.engine.Next()
	if !ok {
		return 0, false
	}
	wait := max(0, time.Duration(float64(next.Sub(now))/w.speedup))
	return wait, true
}

// stop fails everything in flight and refuses new work.
func (w *Worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for id, ref := range w.pending {
		w.engine.Cancel(id)
		ref.job.aborted = true
		signal(ref.job.notify)
		delete(w.pending, id)
	}
}

// genSpec is one prompt to generate for.
type genSpec struct {
	prompt    int
	hash      uint64
	maxTokens int
	ignoreEOS bool
	seed      int64
}

// submit queues one engine request per spec and returns their job.
func (w *Worker) submit(specs []genSpec) (*job, error) {
	j := &job{notify: make(chan struct{}, 1), choices: make([]choice, len(specs))}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil, ErrStopped
	}
	for i, s := range specs {
		w.nextID++
		key := s.hash ^ uint64(w.seed) ^ mix(uint64(s.seed))
		c := choice{
			id:     w.nextID,
			prompt: s.prompt,
			max:    s.maxTokens,
			target: outputLength(s.hash, w.seed^s.seed, s.maxTokens, s.ignoreEOS),
			key:    key,
		}
		if err := w.engine.Submit(Request{ID: c.id, PromptTokens: c.prompt, OutputTokens: c.target}); err != nil {
			w.cancelLocked(j, i)
			return nil, err
		}
		j.choices[i] = c
		w.pending[c.id] = pendingRef{job: j, index: i}
	}
	signal(w.wake)
	return j, nil
}

// release cancels whatever the job still has in the engine; handlers defer it
// so a client that goes away frees its slot and KV blocks at once.
func (w *Worker) release(j *job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelLocked(j, len(j.choices)) {
		signal(w.wake)
	}
}

func (w *Worker) cancelLocked(j *job, n int) bool {
	cancelled := false
	for i := range n {
		c := &j.choices[i]
		if c.done {
			continue
		}
		if _, ok := w.pending[c.id]; ok {
			delete(w.pending, c.id)
			cancelled = w.engine.Cancel(c.id) || cancelled
		}
	}
	return cancelled
}

// snapshot copies the job's progress for the handler.
func (w *Worker) snapshot(j *job, dst []choice) ([]choice, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(dst[:0], j.choices...), j.aborted
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
