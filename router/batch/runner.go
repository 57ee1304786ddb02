package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for RunnerOptions fields left zero.
const (
	DefaultConcurrency = 64
	DefaultInterval    = 200 * time.Millisecond
	DefaultLeaseTTL    = time.Minute
	DefaultMaxAttempts = 3
)

// maxLineBytes bounds one line of an input file (its request body and
// envelope); maxResultBytes bounds one answer kept for the output file.
const (
	maxLineBytes   = 16 << 20
	maxResultBytes = 64 << 20
)

// RunnerOptions configures a Runner. Zero fields mean the documented
// defaults.
type RunnerOptions struct {
	// Handler serves the inference routes: the router's own handler, so
	// that each line passes its whole pipeline (limits, admission,
	// routing). Required.
	Handler http.Handler
	// RunAs returns ctx carrying tenant as the identity the Handler
	// authenticates (auth.WithTenant), and marked as a batch line
	// (admission.WithBatch: it runs only in what other requests leave,
	// and gives up waiting for admission when draining closes, as the
	// runner's drain starts). Nil: lines run with no tenant and unmarked,
	// as on a router without tenants.
	RunAs func(ctx context.Context, tenant string, draining <-chan struct{}) context.Context
	// Concurrency bounds the lines this runner has in flight. Default 64.
	Concurrency int
	// Interval is how often the runner looks at the batches (validates new
	// ones, ends finished, expired and cancelled ones) and the longest a
	// refused dispatch waits before it tries again. Default 200ms.
	Interval time.Duration
	// LeaseTTL is how long a line claimed by a runner that stops renewing
	// it (its replica died) stays claimed. Default 1m.
	LeaseTTL time.Duration
	// MaxAttempts is how many times a line the fleet failed (5xx other
	// than 503) runs before its error is its result. Default 3.
	MaxAttempts int
	// Drain is how long the lines running when Run's context ends may go
	// on (their claims renewed) to finish and record their answers; those
	// still running then are stopped and given back. Zero stops them at
	// once. cmd/sluice passes its --shutdown-timeout, so that a rolling
	// restart does not throw away the GPU work of every line in flight.
	Drain time.Duration
	// Holder names this runner in its claims. Default a random name.
	Holder string
	// Metrics is where the runner registers its collectors. Nil means
	// none are registered.
	Metrics prometheus.Registerer
}

// Runner runs the batches of a Service: it validates new batches, claims
// pending lines and runs each through the Handler as the batch's tenant,
// in the flex service class, and ends batches that are done, expired or
// cancelled by writing their output and error files. Several runners
// (one per replica) may share a Store; each line's claim keeps the others
// off it.
//
// A line refused for want of capacity (429 resource_unavailable from
// admission, or 503) is not a failure: it goes back to pending, and the
// runner holds off its model (Interval, doubling with each refusal in a
// row, at most the answer's Retry-After) and halves the lines it sends
// that model at once, which grows again by one with each answer (AIMD),
// so that batch work fills what the admission queue takes without
// flooding it. A line refused by its tenant's rate limits (429) waits too,
// and the tenant is held off for the answer's Retry-After. Other 4xx
// answers are the line's result; 5xx answers are retried up to
// MaxAttempts.
type Runner struct {
	s *Service
	o RunnerOptions

	busy  atomic.Int64
	freed chan struct{}
	// draining closes as the drain starts (RunAs passes it on).
	draining chan struct{}

	lines    *prometheus.CounterVec // outcome
	inFlight prometheus.GaugeFunc
	expired  prometheus.Counter

	mu       sync.Mutex
	inputs   map[string]*input
	running  map[string]map[int]context.CancelFunc // batch -> line -> cancels it
	attempts map[lineKey]int
	flows    map[string]*flow     // by model
	held     map[string]time.Time // tenants over their rate limits, until when

	// Only Run's goroutine touches these.
	active    []BatchMeta
	lastRenew time.Time
	lastSweep time.Time
}

// sweepEvery is how often a runner deletes expired files, sweepGrace how
// long after their expiry: an expired file is gone from the API at once,
// but a list paged with it as the cursor goes on for that long.
const (
	sweepEvery = time.Minute
	sweepGrace = time.Hour
)

type lineKey struct {
	batch string
	line  int
}

// input is a running batch's input file, open, with its index.
type input struct {
	f     *os.File
	index []span
}

type task struct {
	b    BatchMeta
	line int
	ctx  context.Context
}

// NewRunner returns a runner of s's batches.
func NewRunner(s *Service, o RunnerOptions) (*Runner, error) {
	if s == nil || o.Handler == nil {
		return nil, errors.New("batch: a Runner needs a Service and a Handler")
	}
	if o.Concurrency < 0 || o.Interval < 0 || o.LeaseTTL < 0 || o.MaxAttempts < 0 || o.Drain < 0 {
		return nil, errors.New("batch: Concurrency, Interval, LeaseTTL, MaxAttempts and Drain must not be negative")
	}
	o.Concurrency = cmp.Or(o.Concurrency, DefaultConcurrency)
	o.Interval = cmp.Or(o.Interval, DefaultInterval)
	o.LeaseTTL = cmp.Or(o.LeaseTTL, DefaultLeaseTTL)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, DefaultMaxAttempts)
	o.Holder = cmp.Or(o.Holder, newID("runner-"))
	if o.RunAs == nil {
		o.RunAs = func(ctx context.Context, _ string, _ <-chan struct{}) context.Context { return ctx }
	}
	r := &Runner{s: s, o: o, freed: make(chan struct{}, 1), draining: make(chan struct{}), inputs: map[string]*input{},
		running: map[string]map[int]context.CancelFunc{}, attempts: map[lineKey]int{}, flows: map[string]*flow{}, held: map[string]time.Time{}}
	r.lines = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_batch_lines_total",
		Help: "Batch lines run by this replica, by outcome: completed, failed (the answer or error is the line's result), no_capacity, over_quota, fault (run again later), stopped (given back).",
	}, []string{"outcome"})
	r.inFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_batch_lines_in_flight",
		Help: "Batch lines this replica is running now.",
	}, func() float64 { return float64(r.busy.Load()) })
	r.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_batch_files_expired_total",
		Help: "Files this replica deleted as they expired (expires_after, output_expires_after, batch.file_expiry).",
	})
	if o.Metrics != nil {
		for _, c := range []prometheus.Collector{r.lines, r.inFlight, r.expired} {
			if err := o.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// Run runs batches until ctx ends. It claims no line after that; the
// lines running then have Drain to finish, and those that do not are
// cancelled and given back, pending, for the next run (or another replica).
func (r *Runner) Run(ctx context.Context) error {
	lines, stopLines := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLines()
	work := make(chan task)
	var wg sync.WaitGroup
	for range r.o.Concurrency {
		wg.Go(func() {
			for t := range work {
				r.runLine(t)
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
		r.closeInputs()
	}()
	tick := time.NewTicker(r.o.Interval)
	defer tick.Stop()
	look := true
	for {
		if look {
			r.housekeep(ctx)
		}
		r.dispatch(ctx, lines, work)
		select {
		case <-ctx.Done():
			r.drain(stopLines)
			return nil
		case <-tick.C:
			look = true
		case <-r.s.wake:
			look = true
		case <-r.freed:
			look = false
		}
	}
}

// drain waits up to Drain for the lines running to end, renewing their
// claims, then stops the rest.
func (r *Runner) drain(stop context.CancelFunc) {
	defer stop()
	close(r.draining) // lines still waiting for admission give up: they are given back, not started and cut
	if r.busy.Load() == 0 || r.o.Drain <= 0 {
		return
	}
	r.s.o.Logger.Info("batch runner: letting the lines running finish", "lines", r.busy.Load(), "drain", r.o.Drain.String())
	deadline := time.NewTimer(r.o.Drain)
	defer deadline.Stop()
	renew := time.NewTicker(r.o.LeaseTTL / 3)
	defer renew.Stop()
	for r.busy.Load() > 0 {
		select {
		case <-deadline.C:
			r.s.o.Logger.Warn("batch runner: drain time is up; giving back the lines still running", "lines", r.busy.Load())
			return
		case <-renew.C:
			ctx, cancel := storeCtx()
			r.renew(ctx, r.s.o.Now())
			cancel()
		case <-r.freed:
		}
	}
}

// housekeep looks at every batch that has not ended: validates new ones,
// ends those done, and renews this runner's claims.
func (r *Runner) housekeep(ctx context.Context) {
	now := r.s.o.Now()
	active, err := r.s.o.Store.Active(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.s.o.Logger.Warn("batch runner: listing batches", "err", err)
		}
		return
	}
	slices.SortFunc(active, func(a, b BatchMeta) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	r.active = active
	if now.Sub(r.lastRenew) >= r.o.LeaseTTL/3 {
		r.renew(ctx, now)
		r.lastRenew = now
	}
	if now.Sub(r.lastSweep) >= sweepEvery {
		r.sweep(ctx, now, active)
		r.lastSweep = now
	}
	for i, b := range active {
		var err error
		switch b.Status {
		case StatusValidating:
			active[i], err = r.validate(ctx, b, now)
		case StatusInProgress, StatusCancelling, StatusFinalizing:
			err = r.settle(ctx, b, now)
		}
		if err != nil && ctx.Err() == nil {
			r.s.o.Logger.Warn("batch runner", "batch", b.ID, "status", b.Status, "err", err)
		}
	}
	r.mu.Lock()
	for id, in := range r.inputs {
		if !slices.ContainsFunc(active, func(b BatchMeta) bool { return b.ID == id }) {
			_ = in.f.Close()
			delete(r.inputs, id)
		}
	}
	r.mu.Unlock()
}

// sweep deletes the files expired sweepGrace before now, but for the
// input files of active batches: those go once their batch has ended. The
// API shows no expired file, so none becomes an input meanwhile.
func (r *Runner) sweep(ctx context.Context, now time.Time, active []BatchMeta) {
	files, err := r.s.o.Store.ExpiredFiles(ctx, now.Add(-sweepGrace))
	if err != nil {
		if ctx.Err() == nil {
			r.s.o.Logger.Warn("batch runner: listing expired files", "err", err)
		}
		return
	}
	for _, f := range files {
		if slices.ContainsFunc(active, func(b BatchMeta) bool { return b.InputFileID == f.ID }) {
			continue
		}
		if err := r.s.o.Store.DeleteFile(ctx, f.ID); err != nil {
			if !errors.Is(err, ErrNotFound) && ctx.Err() == nil { // another replica's sweep took it
				r.s.o.Logger.Warn("batch runner: deleting an expired file", "file", f.ID, "err", err)
			}
			continue
		}
		if err := r.s.blobs.remove(f.ID); err != nil {
			r.s.o.Logger.Warn("batch runner: removing an expired file's contents", "file", f.ID, "err", err)
		}
		r.expired.Inc()
	}
}

// renew extends the claims of the lines running here.
func (r *Runner) renew(ctx context.Context, now time.Time) {
	r.mu.Lock()
	held := make(map[string][]int, len(r.running))
	for id, lines := range r.running {
		for line := range lines {
			held[id] = append(held[id], line)
		}
	}
	r.mu.Unlock()
	for id, lines := range held {
		if err := r.s.o.Store.Renew(ctx, id, r.o.Holder, lines, r.o.LeaseTTL, now); err != nil && ctx.Err() == nil {
			r.s.o.Logger.Warn("batch runner: renewing claims", "batch", id, "err", err)
		}
	}
}

// validate checks a new batch's input and starts it, or fails it with
// every problem found.
func (r *Runner) validate(ctx context.Context, b BatchMeta, now time.Time) (BatchMeta, error) {
	f, err := r.s.blobs.open(b.InputFileID)
	if err != nil {
		return r.fail(ctx, b, now, []LineError{{Code: "invalid_file", Param: "input_file_id",
			Message: "the input file " + b.InputFileID + " cannot be read"}})
	}
	c, problems := validate(f, b.Endpoint, r.s.o.MaxLines, maxLineBytes, int(r.s.o.MaxBodyBytes), b.DefaultMaxTokens)
	if problems == nil {
		problems = r.overCap(b, c.tokens)
	}
	if problems != nil {
		_ = f.Close()
		return r.fail(ctx, b, now, problems)
	}
	if err := r.s.o.Store.StartLines(ctx, b.ID, len(c.index)); err != nil {
		_ = f.Close()
		return b, err
	}
	b, err = r.s.o.Store.UpdateBatch(ctx, b.ID, func(m *BatchMeta) error {
		m.Total, m.Model, m.EstimatedTokens = len(c.index), c.model, c.tokens
		if m.Status == StatusValidating {
			m.Status, m.InProgressAt = StatusInProgress, now.Unix()
		}
		return nil
	})
	if err != nil {
		_ = f.Close()
		return b, err
	}
	r.mu.Lock()
	if old := r.inputs[b.ID]; old != nil {
		_ = old.f.Close()
	}
	r.inputs[b.ID] = &input{f: f, index: c.index}
	r.mu.Unlock()
	return b, nil
}

// overCap checks the tier's cap on queued batch tokens: the tenant's
// other batches that have not ended, and this one.
func (r *Runner) overCap(b BatchMeta, tokens int64) []LineError {
	limit, capped := r.s.o.QueuedTokens[b.Tier]
	if !capped {
		return nil
	}
	var queued int64
	for _, o := range r.active {
		if o.Owner == b.Owner && o.ID != b.ID && o.Status != StatusValidating && !o.Status.Terminal() {
			queued += o.EstimatedTokens
		}
	}
	if queued+tokens <= limit {
		return nil
	}
	if tokens > limit { // no wait helps: split the file
		return []LineError{{Code: "token_limit_exceeded", Message: fmt.Sprintf(
			"Enqueued token limit reached for tier %s: this batch alone needs about %d tokens, over the limit of %d. Split it into smaller batches.",
			b.Tier, tokens, limit)}}
	}
	return []LineError{{Code: "token_limit_exceeded", Message: fmt.Sprintf(
		"Enqueued token limit reached for tier %s: this batch needs about %d tokens and %d are queued in other batches; the limit is %d. Try again once they have finished.",
		b.Tier, tokens, queued, limit)}}
}

func (r *Runner) fail(ctx context.Context, b BatchMeta, now time.Time, problems []LineError) (BatchMeta, error) {
	return r.s.o.Store.UpdateBatch(ctx, b.ID, func(m *BatchMeta) error {
		switch m.Status {
		case StatusValidating:
			m.Status, m.FailedAt, m.Errors = StatusFailed, now.Unix(), problems
		case StatusCancelling: // cancelled while validating: it ends cancelled, with nothing run
			m.Status, m.CancelledAt, m.Errors = StatusCancelled, now.Unix(), problems
		}
		return nil
	})
}

// settle ends a started batch once no line of it runs: completed when
// every line has a result, expired past its window, cancelled when
// cancelling. A finalizing batch whose finalizer stopped renewing is
// taken over.
func (r *Runner) settle(ctx context.Context, b BatchMeta, now time.Time) error {
	if b.Status == StatusFinalizing {
		if b.FinalizeUntil < now.UnixMilli() {
			return r.finalize(ctx, b, b.Ending, now)
		}
		return nil
	}
	if b.Total == 0 { // cancelled before it was validated
		return r.finalize(ctx, b, StatusCancelled, now)
	}
	c, err := r.s.o.Store.Counts(ctx, b.ID, now)
	if err != nil {
		return err
	}
	if c.Total == 0 { // its line progress is gone (a Redis flushed): run every line again
		r.s.o.Logger.Warn("batch runner: line progress lost; starting the batch's lines again", "batch", b.ID)
		return r.s.o.Store.StartLines(ctx, b.ID, b.Total)
	}
	var ending Status
	switch {
	case b.Status == StatusCancelling:
		ending = StatusCancelled
	case c.Done() >= b.Total:
		ending = StatusCompleted
	case now.Unix() >= b.ExpiresAt:
		ending = StatusExpired
	default:
		return nil
	}
	if ending != StatusCompleted {
		r.stopLines(b.ID) // lines still waiting here would only delay the end
	}
	if c.Claimed > 0 {
		return nil // they end soon, or their claims expire
	}
	return r.finalize(ctx, b, ending, now)
}

// stopLines cancels the lines of batch id running here.
func (r *Runner) stopLines(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cancel := range r.running[id] {
		cancel()
	}
}

// flow is how many lines of one model this runner sends at once.
type flow struct {
	window   int       // the most in flight
	inflight int       // in flight now
	strikes  int       // capacity refusals since the last answer
	until    time.Time // held off until then
	cut      time.Time // when window was last halved
}

// room is how many more lines of b may start now.
func (r *Runner) room(b BatchMeta, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.held[b.Owner]) {
		return 0
	}
	fl := r.flowLocked(b.Model)
	if now.Before(fl.until) {
		return 0
	}
	return max(fl.window-fl.inflight, 0)
}

func (r *Runner) flowLocked(model string) *flow {
	fl := r.flows[model]
	if fl == nil {
		fl = &flow{window: r.o.Concurrency}
		r.flows[model] = fl
	}
	return fl
}

// refused records a capacity refusal for model: hold off, and halve the
// window; once per Interval, however many lines a wave of refusals hits.
func (r *Runner) refused(model string, retryAfter time.Duration, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fl := r.flowLocked(model)
	if now.Sub(fl.cut) < r.o.Interval {
		return // the same wave
	}
	fl.strikes++
	fl.window, fl.cut = max(fl.window/2, 1), now
	d := r.o.Interval << min(fl.strikes-1, 8)
	if retryAfter > 0 {
		d = min(d, retryAfter)
	}
	fl.until = now.Add(max(d, r.o.Interval))
}

// answered records an answer for model: the window grows by one.
func (r *Runner) answered(model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fl := r.flowLocked(model)
	fl.strikes = 0
	fl.window = min(fl.window+1, r.o.Concurrency)
}

// holdTenant holds off tenant's lines for its rate limits' Retry-After
// (at least Interval, at most a minute).
func (r *Runner) holdTenant(tenant string, d time.Duration, now time.Time) {
	d = min(max(d, r.o.Interval), time.Minute)
	r.mu.Lock()
	defer r.mu.Unlock()
	if until := now.Add(d); until.After(r.held[tenant]) {
		r.held[tenant] = until
	}
}

// dispatch claims pending lines, oldest batch first, and hands them to the
// workers, as long as any is free; each line runs under a context of
// lines, which outlives ctx by the drain.
func (r *Runner) dispatch(ctx, lines context.Context, work chan<- task) {
	now := r.s.o.Now()
	for _, b := range r.active {
		free := r.o.Concurrency - int(r.busy.Load())
		if free <= 0 || ctx.Err() != nil {
			return
		}
		if b.Status != StatusInProgress || now.Unix() >= b.ExpiresAt {
			continue
		}
		n := min(free, r.room(b, now))
		if n == 0 {
			continue
		}
		claimed, err := r.s.o.Store.Claim(ctx, b.ID, r.o.Holder, n, r.o.LeaseTTL, now)
		if err != nil {
			if ctx.Err() == nil {
				r.s.o.Logger.Warn("batch runner: claiming lines", "batch", b.ID, "err", err)
			}
			continue
		}
		for i, line := range claimed {
			lctx, cancel := context.WithCancel(lines)
			r.busy.Add(1)
			r.mu.Lock()
			if r.running[b.ID] == nil {
				r.running[b.ID] = map[int]context.CancelFunc{}
			}
			r.running[b.ID][line] = cancel
			r.flowLocked(b.Model).inflight++
			r.mu.Unlock()
			select {
			case work <- task{b: b, line: line, ctx: lctx}:
			case <-ctx.Done():
				r.done(b, line)
				for _, rest := range claimed[i:] {
					r.release(b.ID, rest)
				}
				return
			}
		}
	}
}

// done forgets a line that stopped running here.
func (r *Runner) done(b BatchMeta, line int) {
	id := b.ID
	r.mu.Lock()
	r.flowLocked(b.Model).inflight--
	if cancel := r.running[id][line]; cancel != nil {
		cancel()
		delete(r.running[id], line)
		if len(r.running[id]) == 0 {
			delete(r.running, id)
		}
	}
	r.mu.Unlock()
	r.busy.Add(-1)
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// storeCtx bounds a Store call made as a line ends, also once Run's
// context is done (a line stopped by shutdown is given back).
func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func (r *Runner) release(id string, line int) {
	ctx, cancel := storeCtx()
	defer cancel()
	if err := r.s.o.Store.Release(ctx, id, r.o.Holder, line); err != nil {
		r.s.o.Logger.Warn("batch runner: giving a line back", "batch", id, "line", line, "err", err)
	}
}

// input returns b's input file and index, opening and indexing it on
// first use.
func (r *Runner) input(b BatchMeta) (*input, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in := r.inputs[b.ID]; in != nil {
		return in, nil
	}
	f, err := r.s.blobs.open(b.InputFileID)
	if err != nil {
		return nil, err
	}
	var index []span
	if err := scanLines(f, maxLineBytes, func(_ int, sp span, _ []byte) error {
		index = append(index, sp)
		return nil
	}); err != nil {
		_ = f.Close()
		return nil, err
	}
	if len(index) != b.Total {
		_ = f.Close()
		return nil, fmt.Errorf("input file %s has %d requests, the batch %d", b.InputFileID, len(index), b.Total)
	}
	in := &input{f: f, index: index}
	r.inputs[b.ID] = in
	return in, nil
}

func (r *Runner) dropInput(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in := r.inputs[id]; in != nil {
		_ = in.f.Close()
		delete(r.inputs, id)
	}
	for k := range r.attempts {
		if k.batch == id {
			delete(r.attempts, k)
		}
	}
}

func (r *Runner) closeInputs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, in := range r.inputs {
		_ = in.f.Close()
		delete(r.inputs, id)
	}
}
