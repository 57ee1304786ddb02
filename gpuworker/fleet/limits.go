package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
)

// Tenant is one tenant of a simulated run: the limit stage of the live
// pipeline (quota.Limiter over an in-process store, on the virtual clock)
// reserves each of its requests on arrival and settles it when it ends.
type Tenant struct {
	// Name identifies the tenant in the report.
	Name string
	// Limits are its tier's limits.
	Limits quota.Limits
	// Share is its relative share of the workload's requests (at least 1).
	// A conversation (workload.Request.Session) stays with one tenant.
	Share int
}

// TenantStats is one tenant's share of a run.
type TenantStats struct {
	Name string
	// Requests counts the tenant's requests; Limited those its limits
	// refused, by the dimension that refused.
	Requests int
	Limited  map[quota.Dimension]int
	// InputTokens and OutputTokens are what its served requests were
	// charged after settlement.
	InputTokens, OutputTokens int64
}

// errLimited prefixes the outcome of a request the limits refused.
const errLimited = "rate limited: "

// limits runs the limit stage for a simulated run.
type limits struct {
	tenants []Tenant
	total   int
	lim     *quota.Limiter
	res     []*quota.Reservation // per request; nil when not reserved
	of      []int                // tenant index per request
	stats   []TenantStats
	clock   *int64 // the sim's virtual now, ns from epoch
}

func newLimits(tenants []Tenant, n int, clock *int64) (*limits, error) {
	l := &limits{tenants: tenants, res: make([]*quota.Reservation, n), of: make([]int, n), clock: clock}
	for _, t := range tenants {
		if t.Share < 1 {
			return nil, fmt.Errorf("fleet: tenant %q: Share must be at least 1", t.Name)
		}
		l.total += t.Share
		l.stats = append(l.stats, TenantStats{Name: t.Name, Limited: map[quota.Dimension]int{}})
	}
	lim, err := quota.NewLimiter(quota.LimiterOptions{
		Store: memstore.New(),
		Now:   func() time.Time { return epoch.Add(time.Duration(*clock)) },
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	l.lim = lim
	return l, nil
}

// tenantOf deals requests to tenants by share: by session when the request
// has one, else by its index (a multiplicative hash spreads both evenly).
func (l *limits) tenantOf(id int, session uint64) int {
	key := uint64(id)
	if session != 0 {
		key = session
	}
	slot := int((key * 0x9E3779B97F4A7C15 >> 33) % uint64(l.total))
	for i, t := range l.tenants {
		if slot < t.Share {
			return i
		}
		slot -= t.Share
	}
	return len(l.tenants) - 1
}

// reserve runs the limit stage for request id; it returns the refusal's
// text when the tenant's limits refused it.
func (l *limits) reserve(id int, session uint64, prompt, output int) (string, error) {
	t := l.tenantOf(id, session)
	l.of[id] = t
	l.stats[t].Requests++
	tn := &l.tenants[t]
	r, err := l.lim.Reserve(context.Background(), tn.Name, tn.Limits,
		quota.Amount{Requests: 1, Input: int64(prompt), Output: int64(output)})
	var re *quota.RejectError
	switch {
	case errors.As(err, &re):
		l.stats[t].Limited[re.Dimension]++
		return errLimited + string(re.Dimension), nil
	case err != nil:
		return "", fmt.Errorf("fleet: limits: %w", err)
	}
	l.res[id] = r
	return "", nil
}

// settle charges request id what it used.
func (l *limits) settle(id, prompt, output int) {
	r := l.res[id]
	if r == nil {
		return
	}
	l.res[id] = nil
	l.lim.Settle(r, quota.Amount{Requests: 1, Input: int64(prompt), Output: int64(output)})
	st := &l.stats[l.of[id]]
	st.InputTokens += int64(prompt)
	st.OutputTokens += int64(output)
}
