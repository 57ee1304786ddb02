package fleet

import (
	"errors"
	"time"

	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// Batch is a Batch API batch run beside the workload (Options.Batch), as
// the router's batch runner sends it: the lines go to admission in the
// batch's class, at most Concurrency at once; each line that ends sends
// the next at that instant, and a line admission sheds is sent again
// after ShedRetry. The lines' own Arrival fields are ignored.
//
// What the live runner does that this does not: it halves its
// concurrency after a shed and grows it back one line per answer, and
// lines count against their tenant's limits (Options.Tenants cannot be
// given with a batch).
type Batch struct {
	// Requests are the batch's lines, in file order.
	Requests []workload.Request
	// Concurrency is how many lines are sent and not yet ended at once.
	// Zero means DefaultBatchConcurrency.
	Concurrency int
	// Start is when the batch is created, after the workload's first
	// arrival (or at zero without one).
	Start time.Duration
	// Class is the lines' service class; the Batch API's is
	// admission.Flex (the zero value, Priority, means Flex here). Default
	// shows the same lines sent as ordinary traffic.
	Class admission.Class
	// Tenant names the batch's tenant for admission's fair share; default
	// "batch".
	Tenant string
}

// DefaultBatchConcurrency is the router's batch.concurrency default.
const DefaultBatchConcurrency = 64

// ShedRetry is how long the simulated runner waits to send a shed line
// again: the Retry-After the router gives a shed flex request.
const ShedRetry = 5 * time.Second

// BatchResult is what a run measured of its batch.
type BatchResult struct {
	// Requests holds one Outcome per line, in line order, measured from
	// the line's last sending.
	Requests []Outcome
	// Start is when the batch began and End when its last line ended, as
	// offsets on the workload's clock.
	Start, End time.Duration
	// Ended holds when each line ended (finished or failed), on the
	// workload's clock.
	Ended []time.Duration
	// Resent counts the sendings after a shed.
	Resent int
}

// Duration is how long the batch took.
func (b *BatchResult) Duration() time.Duration { return b.End - b.Start }

// runner is the simulated batch runner of one run. Line i is request id
// first+i of the sim.
type runner struct {
	s           *sim
	first, n    int
	concurrency int
	sent        int     // lines sent at least once
	due         []dueAt // sendings waiting for their time, by time
	start, end  int64
	resent      int
}

type dueAt struct {
	t  int64
	id int
}

func checkBatch(opts Options) error {
	b := opts.Batch
	if b == nil {
		return nil
	}
	var errs []error
	if b.Concurrency < 0 {
		errs = append(errs, errors.New("fleet: Batch.Concurrency must not be negative"))
	}
	if b.Class >= admission.NumClasses {
		errs = append(errs, errors.New("fleet: Batch.Class is not a class"))
	}
	if opts.Oracle {
		errs = append(errs, errors.New("fleet: a batch runs through Pickers, not the oracle"))
	}
	if len(opts.Tenants) > 0 {
		errs = append(errs, errors.New("fleet: Options.Tenants cannot be given with a batch"))
	}
	return errors.Join(errs...)
}

// withBatch returns the sim's requests, the workload's then the batch's
// lines, and the per-request options extended to match.
func withBatch(opts Options, reqs []workload.Request) (Options, []workload.Request) {
	b := opts.Batch
	if b == nil || len(b.Requests) == 0 {
		return opts, reqs
	}
	n, m := len(reqs), len(b.Requests)
	all := make([]workload.Request, 0, n+m)
	all = append(append(all, reqs...), b.Requests...)
	class := b.Class
	if class == admission.Priority {
		class = admission.Flex
	}
	classes := make([]admission.Class, n+m)
	if opts.Classes != nil {
		copy(classes, opts.Classes)
	} else {
		for i := range n {
			classes[i] = admission.Default
		}
	}
	for i := n; i < n+m; i++ {
		classes[i] = class
	}
	opts.Classes = classes
	tenants := make([]string, n+m)
	copy(tenants, opts.TenantOf)
	name := b.Tenant
	if name == "" {
		name = "batch"
	}
	for i := n; i < n+m; i++ {
		tenants[i] = name
	}
	opts.TenantOf = tenants
	return opts, all
}

func newRunner(s *sim, first int) *runner {
	b := s.opts.Batch
	r := &runner{s: s, first: first, n: len(s.reqs) - first, concurrency: b.Concurrency}
	if r.concurrency == 0 {
		r.concurrency = DefaultBatchConcurrency
	}
	if first > 0 {
		r.start = s.arrival[0]
	}
	r.start += int64(b.Start)
	for range min(r.concurrency, r.n) {
		r.sendNext(r.start)
	}
	return r
}

// sendNext schedules the next line never sent, at t.
func (r *runner) sendNext(t int64) {
	if r.sent < r.n {
		r.schedule(r.first+r.sent, t)
		r.sent++
	}
}

func (r *runner) schedule(id int, t int64) {
	i := len(r.due)
	r.due = append(r.due, dueAt{})
	for i > 0 && r.due[i-1].t > t {
		r.due[i] = r.due[i-1]
		i--
	}
	r.due[i] = dueAt{t: t, id: id}
}

// next is the earliest sending due, if any.
func (r *runner) next() (dueAt, bool) {
	if len(r.due) == 0 {
		return dueAt{}, false
	}
	return r.due[0], true
}

// pop takes the earliest sending out and readies its line to arrive.
func (r *runner) pop() int {
	d := r.due[0]
	r.due = r.due[:copy(r.due, r.due[1:])]
	s := r.s
	s.arrival[d.id] = d.t
	o := &s.out[d.id]
	*o = Outcome{Worker: -1, PromptTokens: s.reqs[d.id].PromptTokens, Class: o.Class, Tenant: o.Tenant}
	return d.id
}

// ended notes that line id ended at t (finished, refused, or shed) and
// sends another: the same line after ShedRetry when admission shed it,
// else the next one.
func (r *runner) ended(id int, t int64) {
	if r.s.out[id].Shed() {
		r.resent++
		r.schedule(id, t+int64(ShedRetry))
		return
	}
	r.end = max(r.end, t)
	r.sendNext(t)
}

func (r *runner) result() *BatchResult {
	out := make([]Outcome, r.n)
	copy(out, r.s.out[r.first:])
	ended := make([]time.Duration, r.n)
	for i := range ended {
		ended[i] = time.Duration(r.s.arrival[r.first+i]) + out[i].E2E
		if !out[i].OK {
			ended[i] = time.Duration(r.s.arrival[r.first+i]) + out[i].Held
		}
	}
	return &BatchResult{Requests: out, Ended: ended, Start: time.Duration(r.start), End: time.Duration(max(r.end, r.start)), Resent: r.resent}
}

// isBatch reports whether request id is a batch line.
func (s *sim) isBatch(id int) bool { return s.batch != nil && id >= s.batch.first }

// confined reports whether request id is a batch line sent as the Batch
// API sends it (flex), which Admission.BatchPrefill keeps to what the
// other requests leave; lines sent as ordinary traffic are not.
func (s *sim) confined(id int) bool { return s.isBatch(id) && s.out[id].Class == admission.Flex }
