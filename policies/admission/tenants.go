package admission

import "cmp"

// TenantShares counts each tenant's requests in flight through a gate and
// its weight, with running sums, so that whether a tenant holds less than
// its weighted share costs the same however many tenants are in flight
// (a loop over them ran under the gate's lock at every binding). The
// simulator's gate counts with it too. It is not safe for concurrent use.
type TenantShares struct {
	n       map[string]int
	w       map[string]float64 // each tenant's weight, as shareWeight
	total   int                // requests in flight, all tenants
	weights float64            // the sum of w
}

// NewTenantShares returns an empty count.
func NewTenantShares() *TenantShares {
	return &TenantShares{n: map[string]int{}, w: map[string]float64{}}
}

// shareWeight is a request's weight as shares count it: 1 when unset or
// not positive.
func shareWeight(w float64) float64 { return cmp.Or(max(w, 0), 1) }

// Add counts one more request of tenant t, whose weight is now w.
func (s *TenantShares) Add(t string, w float64) {
	w = shareWeight(w)
	s.weights += w - s.w[t] // s.w[t] is 0 for a tenant not in flight
	s.w[t] = w
	s.n[t]++
	s.total++
}

// Remove counts one request of tenant t less.
func (s *TenantShares) Remove(t string) {
	n, ok := s.n[t]
	if !ok {
		return
	}
	s.total--
	if n > 1 {
		s.n[t] = n - 1
		return
	}
	s.weights -= s.w[t]
	delete(s.n, t)
	delete(s.w, t)
	if len(s.n) == 0 {
		s.weights = 0 // no rounding left over
	}
}

// Others reports whether a tenant other than t has requests in flight.
func (s *TenantShares) Others(t string) bool {
	_, in := s.n[t]
	return len(s.n) > 1 || len(s.n) == 1 && !in
}

// Below reports whether tenant t, whose weight is w, holds less than its
// weighted share of the requests in flight while another tenant holds
// some.
func (s *TenantShares) Below(t string, w float64) bool {
	w = shareWeight(w)
	mine := s.n[t]
	others, weights := len(s.n), s.weights+w
	if mine > 0 {
		others--
		weights -= s.w[t]
	}
	return others > 0 && float64(mine)/w < float64(s.total)/weights
}

// Tenants is how many tenants have requests in flight.
func (s *TenantShares) Tenants() int { return len(s.n) }
