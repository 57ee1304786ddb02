package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/internal/gcra"
)

const (
	// shardCount spreads tenants over this many mutexes.
	shardCount = 64
	// sweepEvery is how many calls on a shard run between two sweeps of its
	// idle tenants, so a sweep costs O(tenants/shardCount/sweepEvery) per
	// call.
	sweepEvery = 1024
)

// Store keeps every tenant's limit state in memory. Its zero value is not
// usable; call New. A Store must not be copied.
type Store struct {
	seed   maphash.Seed
	shards [shardCount]shard
}

var (
	_ quota.Store     = (*Store)(nil)
	_ quota.InProcess = (*Store)(nil)
)

// InProcess tells the Limiter that calls never wait on I/O (see
// quota.InProcess).
func (*Store) InProcess() {}

type shard struct {
	mu      sync.Mutex
	tenants map[string]*tenant
	calls   uint32
}

// tenant is one key's state.
type tenant struct {
	// tat is each rate dimension's theoretical arrival time in Unix
	// nanoseconds; zero or any time before now means fully replenished.
	tat [3]int64
	// leases maps a lease ID to its expiry (gcra.LeaseExpiry).
	leases map[string]int64
	// days maps a UTC day (gcra.Day) to the tokens charged on it.
	days map[int64]int64
	// purgeAt is, in Unix milliseconds, a time at or before which no lease
	// expires and no daily total goes: purge skips its walk of every lease
	// before it, which a tenant with many requests in flight would
	// otherwise pay on every call (issue 12). Zero: walk on the next
	// purge.
	purgeAt int64
}

// New returns an empty Store.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].tenants = make(map[string]*tenant)
	}
	return s
}

// Reserve implements quota.Store.
func (s *Store) Reserve(ctx context.Context, key string, lim quota.Limits, amt quota.Amount, lease quota.Lease, now time.Time) (quota.Decision, error) {
	if err := ctx.Err(); err != nil {
		return quota.Decision{}, fmt.Errorf("memstore: reserve %q: %w", key, err)
	}
	if err := gcra.CheckReserve(lim, amt, lease, now); err != nil {
		return quota.Decision{}, fmt.Errorf("memstore: reserve %q: %w", key, err)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer sh.tick(now)

	nowNs, day := now.UnixNano(), gcra.Day(now)
	var st gcra.State
	t := sh.tenants[key]
	if t != nil {
		t.purge(now)
		st.DayTotal = t.days[day]
		st.Leases = int64(len(t.leases))
		for i, tat := range t.tat {
			st.Backlog[i] = gcra.Backlog(tat, nowNs)
		}
	}
	o := gcra.Decide(lim, amt, st, now)
	if !o.Allowed {
		return o.Decision(), nil
	}
	if t == nil {
		t = &tenant{}
	}
	for i, r := range o.Rates {
		if r.Limited() {
			t.tat[i] = addBacklog(nowNs, o.Backlog[i])
		}
	}
	if n := amt.Tokens(); lim.TokensPerDay > 0 && n > 0 {
		if t.days == nil {
			t.days = make(map[int64]int64)
		}
		t.days[day] += n
		t.goneAt(dayGone(day))
	}
	if lim.Concurrency > 0 {
		if t.leases == nil {
			t.leases = make(map[string]int64)
		}
		exp := gcra.LeaseExpiry(now, lease.TTL)
		t.leases[lease.ID] = exp
		t.goneAt(exp)
	}
	sh.keep(key, t, now)
	return o.Decision(), nil
}

// Settle implements quota.Store.
func (s *Store) Settle(ctx context.Context, key string, lim quota.Limits, st quota.Settlement, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: settle %q: %w", key, err)
	}
	if err := gcra.CheckSettle(lim, st, now); err != nil {
		return fmt.Errorf("memstore: settle %q: %w", key, err)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer sh.tick(now)

	t := sh.tenants[key]
	if t == nil {
		t = &tenant{}
	}
	t.purge(now)
	delete(t.leases, st.LeaseID)

	nowNs := now.UnixNano()
	var backlog [3]int64
	for i, tat := range t.tat {
		backlog[i] = gcra.Backlog(tat, nowNs)
	}
	after := gcra.Settle(lim, st, backlog)
	for i, b := range after {
		if b != backlog[i] {
			t.tat[i] = addBacklog(nowNs, b)
		}
	}
	if d, ok := gcra.DayDelta(lim, st, now); ok {
		day := gcra.Day(st.ReservedAt)
		if total, found := t.days[day]; found {
			t.days[day] = max(total+d, 0)
		} else if d > 0 {
			if t.days == nil {
				t.days = make(map[int64]int64)
			}
			t.days[day] = d
			t.goneAt(dayGone(day))
		}
	}
	sh.keep(key, t, now)
	return nil
}

// Renew implements quota.Store.
func (s *Store) Renew(ctx context.Context, held []quota.Held, ttl time.Duration, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: renew: %w", err)
	}
	exp := gcra.LeaseExpiry(now, ttl)
	for _, h := range held {
		sh := s.shard(h.Key)
		sh.mu.Lock()
		if t := sh.tenants[h.Key]; t != nil {
			t.purge(now)
			for _, id := range h.IDs {
				// A later expiry keeps purgeAt a time at or before which
				// nothing expires.
				if _, ok := t.leases[id]; ok {
					t.leases[id] = exp
				}
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// keep stores t under key, or forgets key when t is idle, so that a call
// that records nothing leaves nothing behind. The caller holds sh.mu.
func (sh *shard) keep(key string, t *tenant, now time.Time) {
	if t.idle(now) {
		delete(sh.tenants, key)
	} else {
		sh.tenants[key] = t
	}
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// tick counts a call and, every sweepEvery calls, forgets the shard's idle
// tenants. The caller holds sh.mu.
func (sh *shard) tick(now time.Time) {
	sh.calls++
	if sh.calls%sweepEvery != 0 {
		return
	}
	for key, t := range sh.tenants {
		t.purge(now)
		if t.idle(now) {
			delete(sh.tenants, key)
		}
	}
}

// purge drops expired leases and the daily totals no longer kept.
func (t *tenant) purge(now time.Time) {
	ms := gcra.Millis(now)
	if ms < t.purgeAt {
		return // nothing has expired yet
	}
	next := int64(math.MaxInt64)
	for id, exp := range t.leases {
		if exp <= ms {
			delete(t.leases, id)
		} else {
			next = min(next, exp)
		}
	}
	for day := range t.days {
		if gone := dayGone(day); gone <= ms {
			delete(t.days, day)
		} else {
			next = min(next, gone)
		}
	}
	t.purgeAt = next
}

// goneAt notes that something kept expires at ms (Unix milliseconds).
func (t *tenant) goneAt(ms int64) {
	if t.purgeAt != 0 {
		t.purgeAt = min(t.purgeAt, ms)
	}
}

// dayGone is when day's total is no longer kept, in Unix milliseconds:
// gcra.DayTTL(day, now) <= 0 exactly when gcra.Millis(now) >= dayGone(day).
func dayGone(day int64) int64 {
	return (day*86400 + int64(gcra.DayKept/time.Second)) * 1000
}

// idle reports whether forgetting t changes nothing: every dimension is
// replenished, no lease is held and no daily total is kept. Call purge
// first.
func (t *tenant) idle(now time.Time) bool {
	nowNs := now.UnixNano()
	for _, tat := range t.tat {
		if tat > nowNs {
			return false
		}
	}
	return len(t.leases) == 0 && len(t.days) == 0
}

// addBacklog is now + backlog in Unix nanoseconds, or 0 (replenished) for
// no backlog; it saturates rather than wraps.
func addBacklog(now, backlog int64) int64 {
	if backlog <= 0 {
		return 0
	}
	if now > 0 && backlog > (1<<63-1)-now {
		return 1<<63 - 1
	}
	return now + backlog
}
