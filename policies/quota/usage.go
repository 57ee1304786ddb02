package quota

import (
	"sync"
	"time"
)

// Usage is one key's use as this Limiter saw it: what this replica
// reserved and settled, not the store-wide totals other replicas add to.
// It feeds the operator's status page; limits are decided by the Store
// alone.
type Usage struct {
	// InFlight counts the reservations not settled yet: the requests of
	// the key this replica is serving.
	InFlight int64
	// LastMinute is the last 60 seconds' use: the requests reserved and
	// the input and output tokens settled. DeniedLastMinute counts the
	// reservations refused in that time.
	LastMinute       Amount
	DeniedLastMinute int64
	// Total and Denied count the same since the Limiter was built.
	Total  Amount
	Denied int64
	// Today is the input plus output tokens settled since 00:00 UTC.
	Today int64
	// Last is the Store's last decision for the key (store-wide, after
	// its charge) and LastAt when it was made; LastAt is zero before the
	// first one.
	Last   Decision
	LastAt time.Time
}

// Usage returns key's use as this Limiter saw it.
func (l *Limiter) Usage(key string) Usage {
	v, ok := l.use.Load(key)
	if !ok {
		return Usage{}
	}
	return v.(*keyUse).read(l.o.Now())
}

// keyUse is one key's usage: a ring of one-second buckets for the last
// minute, and totals.
type keyUse struct {
	mu       sync.Mutex
	secs     [60]secUse
	inFlight int64
	total    Amount
	denied   int64
	day      int64 // Unix day of today
	today    int64
	last     Decision
	lastAt   time.Time
}

type secUse struct {
	unix   int64
	amt    Amount
	denied int64
}

// usageOf returns key's record, making it on first use (keys are
// configured tenants: the map stays bounded).
func (l *Limiter) usageOf(key string) *keyUse {
	if v, ok := l.use.Load(key); ok {
		return v.(*keyUse)
	}
	v, _ := l.use.LoadOrStore(key, &keyUse{})
	return v.(*keyUse)
}

func (u *keyUse) sec(now time.Time) *secUse {
	s := now.Unix()
	b := &u.secs[s%int64(len(u.secs))]
	if b.unix != s {
		*b = secUse{unix: s}
	}
	return b
}

// reserved records a reservation: allowed (charged, or let through
// uncharged by a failing Store), or refused; d is the Store's decision
// when decided (false: the Store failed).
func (u *keyUse) reserved(now time.Time, allowed bool, d Decision, decided bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.sec(now)
	if allowed {
		u.inFlight++
		u.total.Requests++
		b.amt.Requests++
	} else {
		u.denied++
		b.denied++
	}
	if decided {
		u.last, u.lastAt = d, now
	}
}

// settled records a settlement's real use.
func (u *keyUse) settled(now time.Time, used Amount) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inFlight--
	b := u.sec(now)
	b.amt.Input += used.Input
	b.amt.Output += used.Output
	u.total.Input += used.Input
	u.total.Output += used.Output
	if day := now.Unix() / 86400; day != u.day {
		u.day, u.today = day, 0
	}
	u.today += used.Tokens()
}

func (u *keyUse) read(now time.Time) Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := Usage{InFlight: u.inFlight, Total: u.total, Denied: u.denied, Last: u.last, LastAt: u.lastAt}
	s := now.Unix()
	for _, b := range u.secs {
		if b.unix > s-int64(len(u.secs)) && b.unix <= s {
			out.LastMinute.Requests += b.amt.Requests
			out.LastMinute.Input += b.amt.Input
			out.LastMinute.Output += b.amt.Output
			out.DeniedLastMinute += b.denied
		}
	}
	if u.day == s/86400 {
		out.Today = u.today
	}
	return out
}
