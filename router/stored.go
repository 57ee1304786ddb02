package router

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/proxy"
	"github.com/sluice-llm/sluice/router/respindex"
)

// Stored responses. A backend serving the Responses API (vLLM with its
// store on, SGLang, any OpenAI-compatible server) keeps the responses it
// stores in its own memory, so the requests that continue one
// (previous_response_id) and the calls that read, cancel or delete one
// (GET and DELETE /v1/responses/{id}, .../cancel, .../input_items) must
// reach the backend that made it. Sluice remembers that backend, and the
// tenant whose response it is, in Options.Responses (Redis when the
// replicas share one) once the answer has ended, and sends those requests
// there, through the same pipeline as any other (limits, the admission
// queue, which binds them to that endpoint alone). Another tenant's id,
// or one Sluice remembers none of, is not found; a request continuing an
// id the index does not hold is routed as any other, and the backend it
// reaches answers.

// indexTimeout bounds each call to the response index.
const indexTimeout = time.Second

// previousResponse is where a Responses API request for the route asked
// continuing the stored response id must go: its route (asked's, or a
// fallback's that made it) and endpoint, or nil ones when the index holds
// no such id (or cannot answer, another model made it, or the endpoint
// has left the table or is drained), when it is routed as any request. Another
// tenant's id is a 400 previous_response_not_found, as OpenAI answers an
// unknown one; an endpoint out of routing for now (unreachable, its
// breaker open) a 503 with the time it returns.
func (rt *Router) previousResponse(ctx context.Context, id string, asked *Route, t *auth.Tenant) (*Route, *backends.Endpoint, error) {
	o, found := rt.lookupResponse(ctx, id, t)
	switch found {
	case foundOther:
		return nil, nil, &APIError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "previous_response_id",
			Code: "previous_response_not_found", Message: fmt.Sprintf("Previous response with id '%s' not found.", echo(id))}
	case foundNone:
		return nil, nil, nil
	}
	if o.Model != asked.Pool.Model() && !slices.Contains(asked.Fallbacks, o.Model) {
		// Made by another model than the one asked (a fallback's aside):
		// the request runs on the model asked, where that backend does
		// not serve it; the backend it reaches answers.
		return nil, nil, nil
	}
	rte, ep := rt.ownerEndpoint(o, t)
	if ep == nil || ep.Drained() {
		return nil, nil, nil
	}
	if now := rt.now(); !ep.Available(now) {
		return nil, nil, storeUnavailable(ep, now)
	}
	rt.metrics.stored.WithLabelValues("pinned").Inc()
	return rte, ep, nil
}

// found is what lookupResponse found.
type found uint8

const (
	foundNone  found = iota // no such id, or the index did not answer
	foundOwn                // the id, the tenant's own
	foundOther              // the id, another tenant's
)

// lookupResponse returns id's owner and whether it is tenant t's. Unknown
// ids and index errors are counted.
func (rt *Router) lookupResponse(ctx context.Context, id string, t *auth.Tenant) (respindex.Owner, found) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexTimeout)
	defer cancel()
	o, ok, err := rt.responses.Get(ctx, id)
	if err != nil {
		rt.metrics.stored.WithLabelValues("index_error").Inc()
		if !ok {
			rt.log.Warn("response index lookup failed; routing as unknown", "err", err)
			return respindex.Owner{}, foundNone
		}
		rt.log.Warn("response index lookup failed; found in this replica's memory", "err", err)
	}
	switch {
	case !ok:
		rt.metrics.stored.WithLabelValues("unknown").Inc()
		return respindex.Owner{}, foundNone
	case o.Tenant != tenantName(t):
		return respindex.Owner{}, foundOther
	}
	return o, foundOwn
}

// ownerEndpoint is o's route and endpoint in the current table; nil ones
// when the model or the endpoint has left it, or tenant t may no longer
// use the model.
func (rt *Router) ownerEndpoint(o respindex.Owner, t *auth.Tenant) (*Route, *backends.Endpoint) {
	rte := rt.table.Load().routes[o.Model]
	if rte == nil || rte.Pool.Model() != o.Model || (t != nil && !t.Allows(o.Model)) {
		return nil, nil
	}
	for _, e := range rte.Pool.Endpoints() {
		if e.Address() == o.Backend {
			return rte, e
		}
	}
	return nil, nil
}

// rememberResponse records o as the owner of the stored response id, as
// soon as the answer shows the id (measure.Writer.OnResponseID): before the
// client can use the response to continue it. A failure is logged and
// counted (a request continuing it is then routed as any other).
func (rt *Router) rememberResponse(ctx context.Context, id string, o respindex.Owner) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexTimeout)
	defer cancel()
	if err := rt.responses.Put(ctx, id, o); err != nil {
		rt.metrics.stored.WithLabelValues("index_error").Inc()
		rt.log.Warn("response index write failed", "response_id", id, "backend", o.Backend, "err", err)
		return
	}
	rt.metrics.stored.WithLabelValues("remembered").Inc()
}

// storedResponse relays a call on a stored response (GET or DELETE
// /v1/responses/{id}, POST .../cancel, GET .../input_items) to the backend
// that made it. An id the index does not hold for the caller's tenant is a
// 404, as OpenAI answers; a DELETE the backend accepts is forgotten.
func (rt *Router) storedResponse(w http.ResponseWriter, r *http.Request) {
	tenant, err := rt.tenants.Load().Authenticate(r)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	id := chi.URLParam(r, "id")
	notFound := &APIError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "response_id", Code: "not_found",
		Message: fmt.Sprintf("Response with id '%s' not found.", echo(id))}
	o, f := rt.lookupResponse(r.Context(), id, tenant)
	if f != foundOwn {
		writeError(w, notFound)
		return
	}
	rte, ep := rt.ownerEndpoint(o, tenant)
	if ep == nil {
		writeError(w, notFound) // its backend has left: so has the response
		return
	}
	// A drained backend still answers for what it holds.
	if now := rt.now(); !ep.Available(now) && !ep.Drained() {
		writeError(w, storeUnavailable(ep, now))
		return
	}
	rt.metrics.stored.WithLabelValues("pinned").Inc()
	sw := &statusWriter{ResponseWriter: w}
	if r.Method == http.MethodDelete {
		// Forgotten once the backend accepts, before the client hears it:
		// a read right after the answer must not find it here.
		sw.onOK = func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), indexTimeout)
			defer cancel()
			if err := rt.responses.Delete(ctx, id); err != nil {
				rt.metrics.stored.WithLabelValues("index_error").Inc()
				rt.log.Warn("response index delete failed", "response_id", id, "err", err)
			}
		}
	}
	err = rt.proxy.Forward(sw, r, proxy.Attempt{Target: ep.URL(), Authorization: ep.Authorization(), FirstByteTimeout: rte.FirstByteTimeout})
	if err != nil {
		writeError(w, errorFor(&upstreamError{class: classify(err, sw.status), err: err}))
	}
}

// storeUnavailable is the 503 for a request whose stored response is on
// ep, out of routing at now (unreachable, or its breaker open): it names
// what is missing, and when ep returns.
func storeUnavailable(ep *backends.Endpoint, now time.Time) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "no_backend_available",
		Message:    "The backend holding the stored response is not available; try again later.",
		RetryAfter: max(ep.AvailableAt().Sub(now), time.Second)}
}

// tenantName is t's name, "" without tenants.
func tenantName(t *auth.Tenant) string {
	if t == nil {
		return ""
	}
	return t.Name
}
