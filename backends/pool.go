package backends

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// Pool is the set of endpoints that serve one model. It is immutable once
// built; its endpoints' counters change, the membership does not.
type Pool struct {
	model     string
	endpoints []*Endpoint
}

// NewPool returns a pool for model over endpoints (copied).
func NewPool(model string, endpoints []*Endpoint) (*Pool, error) {
	if model == "" {
		return nil, errors.New("pool: empty model name")
	}
	if len(endpoints) == 0 {
		return nil, errors.New("pool " + model + ": no endpoints")
	}
	eps := make([]*Endpoint, len(endpoints))
	copy(eps, endpoints)
	return &Pool{model: model, endpoints: eps}, nil
}

// Model is the model name the pool serves.
func (p *Pool) Model() string { return p.model }

// Endpoints returns the pool's endpoints. The slice is shared: callers must
// not modify it.
func (p *Pool) Endpoints() []*Endpoint { return p.endpoints }

// Available appends to dst the endpoints that may be routed to at now and
// returns it. When every endpoint is available it returns the pool's own
// slice without copying, so the common case allocates nothing.
func (p *Pool) Available(dst []*Endpoint, now time.Time) []*Endpoint {
	all := true
	for _, e := range p.endpoints {
		if !e.Available(now) {
			all = false
			break
		}
	}
	if all {
		return p.endpoints
	}
	for _, e := range p.endpoints {
		if e.Available(now) {
			dst = append(dst, e)
		}
	}
	return dst
}

// Registry keeps one Endpoint per address across reloads, so an endpoint's
// counters and health survive a config change that keeps it.
type Registry struct {
	mu       sync.RWMutex // the metrics read it while a reload adds to it
	byAddr   map[string]*Endpoint
	breakers *BreakerSettings
}

// SetBreakers gives every endpoint the registry makes from now on a circuit
// breaker with s.
func (r *Registry) SetBreakers(s BreakerSettings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breakers = &s
}

// NewRegistry returns an empty endpoint registry.
func NewRegistry() *Registry { return &Registry{byAddr: map[string]*Endpoint{}} }

// Lookup returns the endpoint for rawURL if the registry has made it.
func (r *Registry) Lookup(rawURL string) (*Endpoint, bool) {
	e, err := NewEndpoint(rawURL, 1)
	if err != nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	old, ok := r.byAddr[e.Address()]
	return old, ok
}

// Endpoints returns every endpoint the registry has made, backends a
// reload removed included (their requests in flight finish there), by
// address.
func (r *Registry) Endpoints() []*Endpoint {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Endpoint, 0, len(r.byAddr))
	for _, e := range r.byAddr {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Endpoint) int { return strings.Compare(a.Address(), b.Address()) })
	return out
}

// Get returns the endpoint for rawURL, creating it with weight on first
// use. An endpoint already known is returned as it is, whatever weight
// says: a weight that changes is SetWeight's (until 2026-12-02 it made a
// new endpoint, and a reload that changed a weight lost the backend's
// drain, in-flight count, counters and health).
func (r *Registry) Get(rawURL string, weight int) (*Endpoint, error) {
	e, err := NewEndpoint(rawURL, weight)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byAddr[e.Address()]; ok {
		return old, nil
	}
	if r.breakers != nil {
		e.SetBreaker(*r.breakers)
	}
	r.byAddr[e.Address()] = e
	return e, nil
}
