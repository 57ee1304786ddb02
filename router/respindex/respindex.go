// Package respindex remembers which backend holds each response the
// Responses API stored, and whose it is. vLLM and the other
// OpenAI-compatible servers keep stored responses in their own memory, so
// a request that continues one (previous_response_id) and the calls that
// read, cancel or delete it must reach the backend that made it: sent
// anywhere else they find nothing (404), or start the conversation over.
//
// Contracts: an Index is safe for concurrent use; Get reports a missing or
// expired id as not found, never as an error; an error means the index
// could not answer (Redis down), and the caller routes as if unknown
// unless the answer came from a Fallback's local memory (ok true).
package respindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Owner is where a stored response lives and whose it is.
type Owner struct {
	// Model is the served model's name (the route's, never an alias).
	Model string `json:"m"`
	// Backend is the endpoint's address (backends.Endpoint.Address).
	Backend string `json:"b"`
	// Tenant is the tenant whose request made it; empty when no tenants
	// are configured.
	Tenant string `json:"t,omitempty"`
}

// Index maps response ids to their Owner.
type Index interface {
	// Put records id's owner for the index's time to live.
	Put(ctx context.Context, id string, o Owner) error
	// Get returns id's owner; ok is false when the index holds none. With
	// an error, ok may still be true: a Fallback answered from its local
	// memory what the shared index could not.
	Get(ctx context.Context, id string) (o Owner, ok bool, err error)
	// Delete forgets id.
	Delete(ctx context.Context, id string) error
}

// DefaultTTL is how long an id is remembered when no TTL is given.
const DefaultTTL = 24 * time.Hour

// DefaultMaxEntries bounds a Memory index when no bound is given: at about
// 200 bytes an entry, 40 MB.
const DefaultMaxEntries = 200_000

// Memory is an Index for one replica, in its own memory: the oldest ids go
// first once it holds MaxEntries or they outlive the TTL.
type Memory struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu    sync.Mutex
	byID  map[string]memEntry
	order []memRef // by Put, oldest first, from head
	head  int
	seq   uint64
}

type memEntry struct {
	owner   Owner
	expires time.Time
	seq     uint64 // the Put that wrote it: an older ref in order is stale
}

type memRef struct {
	id  string
	seq uint64
}

// NewMemory returns a Memory index keeping ids for ttl (DefaultTTL when 0
// or less), at most maxEntries (DefaultMaxEntries when 0 or less); now is
// its clock (time.Now when nil).
func NewMemory(ttl time.Duration, maxEntries int, now func() time.Time) *Memory {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{ttl: ttl, max: maxEntries, now: now, byID: map[string]memEntry{}}
}

// Put implements Index.
func (m *Memory) Put(_ context.Context, id string, o Owner) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.byID[id] = memEntry{owner: o, expires: now.Add(m.ttl), seq: m.seq}
	m.order = append(m.order, memRef{id: id, seq: m.seq})
	for m.head < len(m.order) {
		ref := m.order[m.head]
		e, ok := m.byID[ref.id]
		live := ok && e.seq == ref.seq
		if live && len(m.byID) <= m.max && now.Before(e.expires) {
			break
		}
		if live {
			delete(m.byID, ref.id)
		}
		m.order[m.head] = memRef{}
		m.head++
	}
	if m.head > len(m.order)/2 { // compact: order holds at most twice what is live
		m.order = append(m.order[:0], m.order[m.head:]...)
		m.head = 0
	}
	return nil
}

// Get implements Index.
func (m *Memory) Get(_ context.Context, id string) (Owner, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok || !now.Before(e.expires) {
		return Owner{}, false, nil
	}
	return e.owner, true, nil
}

// Delete implements Index.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byID, id)
	return nil
}

// Len is how many ids the index holds (expired ones not yet dropped
// included).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}

// Redis is an Index shared by every replica using the same Redis and key
// prefix: one key per id, {prefix}:resp:{id}, expiring after the TTL.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedis returns a Redis index on c with keys under prefix ("sluice"
// when empty), kept for ttl (DefaultTTL when 0 or less).
func NewRedis(c redis.UniversalClient, prefix string, ttl time.Duration) (*Redis, error) {
	if c == nil {
		return nil, errors.New("respindex: nil Redis client")
	}
	if prefix == "" {
		prefix = "sluice"
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("respindex: key prefix %q must not contain '{' or '}'", prefix)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Redis{c: c, prefix: prefix + ":resp:", ttl: ttl}, nil
}

// Put implements Index.
func (r *Redis) Put(ctx context.Context, id string, o Owner) error {
	v, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return r.c.Set(ctx, r.prefix+id, v, r.ttl).Err()
}

// Get implements Index.
func (r *Redis) Get(ctx context.Context, id string) (Owner, bool, error) {
	v, err := r.c.Get(ctx, r.prefix+id).Bytes()
	if errors.Is(err, redis.Nil) {
		return Owner{}, false, nil
	}
	if err != nil {
		return Owner{}, false, err
	}
	var o Owner
	if err := json.Unmarshal(v, &o); err != nil {
		return Owner{}, false, fmt.Errorf("respindex: key %s%s holds %q: %w", r.prefix, id, v, err)
	}
	return o, true, nil
}

// Delete implements Index.
func (r *Redis) Delete(ctx context.Context, id string) error {
	return r.c.Del(ctx, r.prefix+id).Err()
}

// Fallback is an Index over a shared one (Redis) that also keeps what
// this replica puts in its own memory: while the shared one fails, the
// responses made through this replica are still found here. A call that
// finds the shared index failing answers from the local one, with the
// shared index's error (so the caller can count and log it); for
// FallbackBackoff after it, calls skip the shared index and answer from
// the local one without an error, so a Redis that is down costs neither a
// timeout nor a log line per request.
type Fallback struct {
	Shared Index
	Local  *Memory
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	skipUntil atomic.Int64 // Unix ns: the shared index is skipped until then
}

// FallbackBackoff is how long a Fallback skips a shared index that failed.
const FallbackBackoff = time.Second

// shared reports whether the shared index is to be asked now.
func (f *Fallback) shared() bool { return f.now().UnixNano() >= f.skipUntil.Load() }

// failed notes a shared call's error, if any, and returns it.
func (f *Fallback) failed(err error) error {
	if err != nil {
		f.skipUntil.Store(f.now().Add(FallbackBackoff).UnixNano())
	}
	return err
}

func (f *Fallback) now() time.Time {
	if f.Now == nil {
		return time.Now()
	}
	return f.Now()
}

// Put implements Index: it puts id in both, and returns the shared
// index's error.
func (f *Fallback) Put(ctx context.Context, id string, o Owner) error {
	_ = f.Local.Put(ctx, id, o)
	if !f.shared() {
		return nil
	}
	return f.failed(f.Shared.Put(ctx, id, o))
}

// Get implements Index.
func (f *Fallback) Get(ctx context.Context, id string) (Owner, bool, error) {
	var err error
	if f.shared() {
		var o Owner
		var ok bool
		if o, ok, err = f.Shared.Get(ctx, id); err == nil {
			return o, ok, nil
		}
		f.failed(err)
	}
	o, ok, _ := f.Local.Get(ctx, id)
	return o, ok, err
}

// Delete implements Index: it deletes id from both, and returns the
// shared index's error.
func (f *Fallback) Delete(ctx context.Context, id string) error {
	_ = f.Local.Delete(ctx, id)
	if !f.shared() {
		return nil
	}
	return f.failed(f.Shared.Delete(ctx, id))
}
