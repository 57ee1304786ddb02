package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// ShedError is a request admission refused: the queue was full of better
// work, or it waited its class's whole MaxWait. The router answers 503
// with Retry-After, or 429 resource_unavailable for flex.
type ShedError struct {
	Class      Class
	Reason     string // "queue full" or "waited too long"
	RetryAfter time.Duration
}

func (e *ShedError) Error() string {
	return fmt.Sprintf("admission: %s request shed: %s", e.Class, e.Reason)
}

// ErrNoRoom is Rebind's answer when no other endpoint has room.
var ErrNoRoom = errors.New("admission: no other endpoint has room")

// Options configures a Gate. Zero fields mean the documented defaults.
type Options struct {
	// Budget is how many requests an endpoint may have in flight through
	// this gate; 0 or less means no limit for it. Required.
	Budget func(*backends.Endpoint) int
	// QueueSize bounds the waiting requests. Default 1024.
	QueueSize int
	// MaxWait is each class's longest wait before it is shed. Zero
	// entries default to priority 5s, default 30s, flex 10m.
	MaxWait [NumClasses]time.Duration
	// OnShed, if set, is called (outside the lock) for every shed request.
	OnShed func(Class, string)
}

// Request is what admission knows of a request.
type Request struct {
	Class        Class
	TierPriority int
	Tenant       string
	Weight       float64
	// Tokens is the request's estimated cost (prompt plus expected output).
	Tokens int64
	// Routing is what the pool's Picker gets when the request is bound.
	Routing *policies.Request
}

// Gate is one pool's admission queue with late binding: a request is bound
// to an endpoint (by the pool's Picker, over the endpoints with room) only
// when one has room, in the queue's order. It is safe for concurrent use.
type Gate struct {
	pool   *backends.Pool
	picker policies.Picker
	o      Options

	mu      sync.Mutex
	q       *Queue
	granted map[*backends.Endpoint]int
	scratch []*backends.Endpoint
	now     func() time.Time
}

// NewGate returns a gate for pool, binding with picker.
func NewGate(pool *backends.Pool, picker policies.Picker, o Options) (*Gate, error) {
	if pool == nil || picker == nil || o.Budget == nil {
		return nil, errors.New("admission: a gate needs a pool, a picker and a budget")
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	defaults := [NumClasses]time.Duration{5 * time.Second, 30 * time.Second, 10 * time.Minute}
	for c := range o.MaxWait {
		if o.MaxWait[c] <= 0 {
			o.MaxWait[c] = defaults[c]
		}
	}
	return &Gate{pool: pool, picker: picker, o: o, q: NewQueue(o.QueueSize),
		granted: map[*backends.Endpoint]int{}, now: time.Now}, nil
}

// Ticket is an admitted request's hold on its endpoint; Release it once
// when the request ends.
type Ticket struct {
	g        *Gate
	ep       *backends.Endpoint
	waited   time.Duration
	released bool
}

// Endpoint is where the request is bound.
func (t *Ticket) Endpoint() *backends.Endpoint { return t.ep }

// Waited is how long the request waited in the queue.
func (t *Ticket) Waited() time.Duration { return t.waited }

// waiter is a queued request's live side.
type waiter struct {
	r     Request
	item  Item
	ready chan result // buffered 1: the binding or the shedding, sent once
}

type result struct {
	ep  *backends.Endpoint
	err error
}

// Admit waits until the request may run and returns its ticket, bound to
// an endpoint. It returns a *ShedError when the request is shed, the
// context's error when the client left (the request leaves the queue at
// once), or the picker's error (policies.ErrNoEndpoint when no endpoint
// is available at all).
func (g *Gate) Admit(ctx context.Context, r Request) (*Ticket, error) {
	start := g.now()
	g.mu.Lock()
	if g.q.Len() == 0 {
		ep, err := g.bindLocked(ctx, r.Routing, nil)
		if ep != nil || !errors.Is(err, ErrNoRoom) {
			g.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return &Ticket{g: g, ep: ep}, nil
		}
	}
	w := &waiter{r: r, ready: make(chan result, 1)}
	w.item = Item{Class: r.Class, TierPriority: r.TierPriority, Tenant: r.Tenant, Weight: r.Weight, Tokens: r.Tokens, Value: w}
	shed, err := g.q.Push(&w.item)
	g.mu.Unlock()
	if shed != nil {
		sw := shed.Value.(*waiter)
		sw.ready <- result{err: g.shedError(sw.r.Class, "queue full")}
	}
	if err != nil {
		return nil, g.shedError(r.Class, "queue full")
	}
	timer := time.NewTimer(g.o.MaxWait[r.Class])
	defer timer.Stop()
	var res result
	select {
	case res = <-w.ready:
	case <-ctx.Done():
		if res, ok := g.leave(w); !ok {
			return nil, ctx.Err()
		} else if res.ep != nil {
			g.release(res.ep) // bound as the client left: give the slot back
		}
		return nil, ctx.Err()
	case <-timer.C:
		var ok bool
		if res, ok = g.leave(w); !ok {
			return nil, g.shedError(r.Class, "waited too long")
		}
	}
	if res.err != nil {
		return nil, res.err
	}
	return &Ticket{g: g, ep: res.ep, waited: g.now().Sub(start)}, nil
}

// leave takes w out of the queue and reports false; when w had already
// left it (bound or shed) it returns the result sent to it and true.
func (g *Gate) leave(w *waiter) (result, bool) {
	g.mu.Lock()
	if w.item.lane != nil {
		g.q.Remove(&w.item)
		g.mu.Unlock()
		return result{}, false
	}
	g.mu.Unlock()
	return <-w.ready, true
}

func (g *Gate) shedError(c Class, reason string) *ShedError {
	if g.o.OnShed != nil {
		g.o.OnShed(c, reason)
	}
	ra := time.Second
	if c == Flex {
		ra = 5 * time.Second
	}
	return &ShedError{Class: c, Reason: reason, RetryAfter: ra}
}

// bindLocked picks an endpoint with room (not in exclude) for routing and
// counts it granted; ErrNoRoom when none has room.
func (g *Gate) bindLocked(ctx context.Context, routing *policies.Request, exclude []*backends.Endpoint) (*backends.Endpoint, error) {
	// Available may return the pool's own slice: never write into it.
	avail := g.pool.Available(nil, g.now())
	if len(avail) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	room := g.scratch[:0]
	for _, e := range avail {
		if b := g.o.Budget(e); (b <= 0 || g.granted[e] < b) && !contains(exclude, e) {
			room = append(room, e)
		}
	}
	g.scratch = room
	if len(room) == 0 {
		return nil, ErrNoRoom
	}
	ep, err := g.picker.Pick(ctx, routing, room)
	if err != nil {
		return nil, err
	}
	g.granted[ep]++
	return ep, nil
}

// dispatchLocked binds waiting requests, in order, while endpoints have
// room.
func (g *Gate) dispatchLocked() {
	for g.q.Len() > 0 {
		it := g.q.Peek()
		w := it.Value.(*waiter)
		ep, err := g.bindLocked(context.Background(), w.r.Routing, nil)
		if errors.Is(err, ErrNoRoom) || errors.Is(err, policies.ErrNoEndpoint) {
			return // wait for the next release (or the waiter's own deadline)
		}
		g.q.Pop()
		w.ready <- result{ep: ep, err: err}
	}
}

func (g *Gate) release(ep *backends.Endpoint) {
	g.mu.Lock()
	if g.granted[ep]--; g.granted[ep] <= 0 {
		delete(g.granted, ep)
	}
	g.dispatchLocked()
	g.mu.Unlock()
}

// Release gives the ticket's slot back, and binds the next waiting
// request if one waits. Later calls do nothing.
func (t *Ticket) Release() {
	if t == nil || t.released {
		return
	}
	t.released = true
	t.g.release(t.ep)
}

// Rebind moves the ticket to another endpoint with room that is not in
// exclude (a retry after the first could not be reached), without waiting;
// ErrNoRoom when there is none, and the ticket keeps its old endpoint.
func (t *Ticket) Rebind(ctx context.Context, routing *policies.Request, exclude []*backends.Endpoint) error {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ep, err := g.bindLocked(ctx, routing, exclude)
	if err != nil {
		return err
	}
	if g.granted[t.ep]--; g.granted[t.ep] <= 0 {
		delete(g.granted, t.ep)
	}
	t.ep = ep
	g.dispatchLocked()
	return nil
}

// Waiting is how many requests wait.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.Len()
}

func contains(eps []*backends.Endpoint, e *backends.Endpoint) bool {
	for _, x := range eps {
		if x == e {
			return true
		}
	}
	return false
}
