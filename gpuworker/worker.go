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
	// Seed varies the pseudo-random output lengths and texts and the
	// choice of requests that get injected errors; default 0.
	Seed int64
	// CustomProfile, when not nil, is simulated instead of the profile named
	// by Profile (for profiles loaded from a file); it must pass Validate.
	CustomProfile *Profile
	// Dialect picks the metric names /metrics exports: DialectVLLM (the
	// default, also for ""), DialectSGLang or DialectTGI.
	Dialect string
	// Faults are the failures to inject from the start; the zero value
	// injects none. See Faults and /admin/faults.
	Faults Faults
	// OnCrash, if not nil, is called once each time the worker crashes
	// (Faults.CrashAfter), from the request goroutine that tripped it. It
	// must not block; cmd/gpuworker closes the worker's server from it.
	OnCrash func()
	// StoreResponses keeps the newest this many Responses API responses
	// (those not sent with store: false), as vLLM does with its response
	// store on: a request may continue one (previous_response_id), and GET
	// and DELETE /v1/responses/{id} read and delete it. 0 (the default)
	// keeps none, as vLLM by default: previous_response_id is a 404.
	StoreResponses int
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
	done    chan struct{} // closed when Run stops
	started atomic.Bool
	wall0   time.Time
	met     *metrics
	onCrash func()

	faults atomic.Pointer[faultState]
	latch  atomic.Pointer[crashLatch]
	rolls  atomic.Uint64

	stored *responseStore // nil: responses are not kept

	mu        sync.Mutex
	engine    *Engine
	pending   map[uint64]pendingRef
	nextID    uint64
	stopped   bool
	events    []Event
	tput      rateWindow
	requests  int64
	successes int64
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

	arrived, first, last time.Time // simulated times, for metrics
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
	prof, err := opts.profile()
	if err != nil {
		return nil, err
	}
	d, err := lookupDialect(opts.Dialect)
	if err != nil {
		return nil, err
	}
	if err := opts.Faults.Validate(); err != nil {
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
		done:    make(chan struct{}),
		wall0:   time.Now(),
		onCrash: opts.OnCrash,
		engine:  eng,
		pending: make(map[uint64]pendingRef),
	}
	if opts.StoreResponses < 0 {
		return nil, fmt.Errorf("gpuworker: Options.StoreResponses must not be negative, got %d", opts.StoreResponses)
	}
	if opts.StoreResponses > 0 {
		w.stored = newResponseStore(opts.StoreResponses)
	}
	if w.speedup == 0 {
		w.speedup = 1
	}
	w.faults.Store(&faultState{f: opts.Faults})
	w.latch.Store(newCrashLatch())
	reg := prometheus.NewRegistry()
	if w.met, err = newMetrics(reg, d, w); err != nil {
		return nil, err
	}
	w.handler = w.routes(reg)
	return w, nil
}

// profile returns the profile the options select.
func (o Options) profile() (Profile, error) {
	if o.CustomProfile != nil {
		return *o.CustomProfile, nil
	}
	name := o.Profile
	if name == "" {
		name = InstantProfile
	}
	return LookupProfile(name)
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

// scrape reads everything /metrics reports in one critical section.
func (w *Worker) scrape() scrape {
	w.mu.Lock()
	defer w.mu.Unlock()
	return scrape{
		load:       w.engine.Load(),
		throughput: w.tput.rate(w.virtualNow()),
		requests:   w.requests,
		successes:  w.successes,
	}
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
		w.met.observe(w.prof, c, ev)
		switch ev.Kind {
		case EventFirstToken, EventToken:
			w.tput.add(ev.Time, 1)
		case EventFinished:
			c.done = true
			w.successes++
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
	close(w.done)
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
	blocks    []uint64 // prefix-cache block hashes
}

// submit queues one engine request per spec and returns their job.
func (w *Worker) submit(specs []genSpec) (*job, error) {
	j := &job{notify: make(chan struct{}, 1), choices: make([]choice, len(specs))}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil, ErrStopped
	}
	now := w.virtualNow()
	for i, s := range specs {
		w.nextID++
		key := s.hash ^ uint64(w.seed) ^ mix(uint64(s.seed))
		c := choice{
			id:      w.nextID,
			prompt:  s.prompt,
			max:     s.maxTokens,
			target:  outputLength(s.hash, w.seed^s.seed, s.maxTokens, s.ignoreEOS),
			key:     key,
			arrived: now,
		}
		req := Request{ID: c.id, PromptTokens: c.prompt, OutputTokens: c.target, BlockHashes: s.blocks}
		if err := w.engine.Submit(req); err != nil {
			w.cancelLocked(j, i)
			return nil, err
		}
		j.choices[i] = c
		w.pending[c.id] = pendingRef{job: j, index: i}
	}
	w.requests += int64(len(specs))
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
