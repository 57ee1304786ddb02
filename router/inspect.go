package router

import (
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
)

// Routes lists the table's routes in order, for read-only inspection (the
// admin status page); callers must not modify them.
func (t *Table) Routes() []*Route {
	out := make([]*Route, 0, len(t.order))
	for _, m := range t.order {
		out = append(out, t.routes[m])
	}
	return out
}

// Route is model's route, nil when the table has none.
func (t *Table) Route(model string) *Route { return t.routes[model] }

// Table is the routing table serving now.
func (rt *Router) Table() *Table { return rt.table.Load() }

// Tenants is the tenant directory serving now (nil or empty: open).
func (rt *Router) Tenants() *auth.Directory { return rt.tenants.Load() }

// Limiter is the tenants' limiter, nil when the router has none.
func (rt *Router) Limiter() *quota.Limiter { return rt.limiter }
