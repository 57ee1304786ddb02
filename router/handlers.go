package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/jsonscan"
	"github.com/sluice-llm/sluice/router/measure"
	"github.com/sluice-llm/sluice/router/middleware"
	"github.com/sluice-llm/sluice/router/proxy"
	"github.com/sluice-llm/sluice/router/respindex"
	"github.com/sluice-llm/sluice/router/usage"
)

// statusClientClosed is logged (never sent) when the client hung up first.
const statusClientClosed = 499

// inference serves the three OpenAI inference routes. It is the request
// pipeline, one stage after the other: authenticate (the tenant), parse
// (the few fields routing needs), limit (reserve the request's estimate
// against the tenant's limits), pick and proxy (with retries on another
// endpoint before the first byte), settle (charge the real usage, refund
// the rest). Each stage returns an error; errorFor turns it into what the
// client sees.
func (rt *Router) inference(w http.ResponseWriter, r *http.Request) {
	rec := requestRecord{start: rt.now(), batch: admission.IsBatch(r.Context())}
	var err error
	// Deferred: a whole answer cut short ends this handler with a panic
	// (http.ErrAbortHandler), and it is counted and logged all the same.
	defer func() { rt.finish(w, r, &rec, err) }()
	err = rt.serve(w, r, &rec)
	rec.returned = true
	traceFailure(r.Context(), err)
}

// serve runs the pipeline up to the answer; it returns nil once an answer
// was relayed, or the error to show the client. It fills in rec as the
// stages learn about the request.
func (rt *Router) serve(w http.ResponseWriter, r *http.Request, rec *requestRecord) (err error) {
	model := &rec.model
	tenant, err := rt.tenants.Load().Authenticate(r)
	if err != nil {
		return err
	}
	rec.tenant = tenant
	var who string
	if tenant != nil {
		who = tenant.Name
	}
	counted := &budgeted{b: rt.bodies, mine: rt.bodies.tenant(who)}
	defer counted.release()
	body, err := rt.readBody(w, r, counted)
	if err != nil {
		return err
	}
	req, err := parseInference(body)
	if err != nil {
		return err
	}
	rte := rt.table.Load().routes[req.model] // by the model's name or an alias
	if rte == nil || (tenant != nil && !tenant.Allows(rte.Pool.Model())) {
		return &modelNotFoundError{model: req.model} // the same answer: a tenant cannot probe
	}
	bodyModel := req.model // the name in the body, which each attempt sends as its backend serves the model
	req.model = rte.Pool.Model()
	*model = req.model
	if err := req.checkRoute(r.URL.Path); err != nil {
		return err
	}
	rec.promptEstimate = req.promptTokens
	if rte.TotalTimeout > 0 {
		ctx, cancel := context.WithTimeoutCause(r.Context(), rte.TotalTimeout, proxy.ErrTotalTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		defer func() {
			if errors.Is(context.Cause(ctx), proxy.ErrTotalTimeout) {
				if err != nil {
					err = errTotalTimeout
				} else {
					rec.timedOut = true // cut mid-answer: the error event said so
				}
			}
		}()
	}
	var pin *backends.Endpoint
	if r.URL.Path == responsesPath {
		if req.previousResponse != "" {
			// It continues a stored response: only the backend that made
			// it holds it (stored.go).
			prte, ep, err := rt.previousResponse(r.Context(), req.previousResponse, rte, tenant)
			if err != nil {
				return err
			}
			if ep != nil {
				rte, req.model, pin = prte, prte.Pool.Model(), ep
			}
		}
		rec.storeResponse = !req.noStore
	}
	if fb := rt.fallback(rte, tenant); fb != nil && pin == nil {
		rt.metrics.fallbacks.WithLabelValues(req.model, fb.Pool.Model()).Inc()
		rte, req.model = fb, fb.Pool.Model() // each attempt rewrites "model" to what its backend serves
	}
	session := r.Header.Get(rt.sessionHeader)
	if session == "" {
		session = req.user
	}
	preq := policies.Request{Model: req.model, Stream: req.stream, PromptTokens: req.promptTokens,
		MaxTokens: req.maxTokens, Choices: req.choices, User: req.user, SessionKey: session, PrefixHashes: req.prefix,
		PrefixChunkTokens: prefixChunk / jsonscan.BytesPerToken, Pin: pin}
	class, err := serviceClass(req.serviceTier, tenant)
	if err != nil {
		return err
	}
	preq.Class = class.String()
	rec.class = preq.Class
	if req.serviceTier != "" {
		preq.ServiceTier = class.String()
	}
	traceRequest(r.Context(), *model, req.model, tenant, preq.Class)
	out := &rec.out
	if tenant == nil {
		ticket, err := rt.admit(r, rte, &preq, class, nil, rec)
		if err != nil {
			return err
		}
		rec.admitted(ticket)
		defer ticket.Release()
		return rt.forward(w, r, rte, &preq, body, bodyModel, false, ticket, rec)
	}
	preq.Tenant, preq.Tier, preq.Priority = tenant.Name, tenant.Tier, tenant.Priority
	ask := quota.Amount{Requests: 1, Input: int64(req.promptTokens)}
	if r.URL.Path != "/v1/embeddings" {
		out := req.maxTokens
		if tenant.DefaultMaxTokens > 0 && (out == 0 || r.URL.Path == "/v1/completions" && req.maxTokensOnly == 0) {
			out = max(out, tenant.DefaultMaxTokens)
			if tenant.Limits.OutputTokensPerMinute > 0 || tenant.Limits.TokensPerDay > 0 {
				// What is reserved is what the backend may generate:
				// without a cap it runs to the context's end (three
				// choices with ignore_eos made 24,555 tokens where 768
				// were reserved). A completion's cap is max_tokens, which
				// legacy servers read where they ignore
				// max_completion_tokens. A tier that limits no output
				// tokens has nothing to hold to: its requests go as sent
				// (every answer was cut at 1,024 tokens).
				key := "max_tokens"
				if r.URL.Path == responsesPath {
					key = "max_output_tokens"
				}
				if b, err := usage.SetMaxTokens(body, key, tenant.DefaultMaxTokens); err == nil {
					body = b
				}
			}
		}
		ask.Output = policies.OutputEstimate(out, req.choices) // each of n completions may run to max_tokens
	}
	// A Batch API line is charged only once admission has bound it, and
	// takes none of its tenant's concurrency slots (its runner bounds the
	// lines it sends, batch.concurrency): flex waits up to 10 minutes in
	// the queue, and lines that held their tenant's slots and tokens there
	// had the tenant's own interactive requests, and its batch cancel,
	// refused 429. Their requests and tokens still count.
	lim := tenant.Limits
	var ticket *admission.Ticket
	if rec.batch {
		lim.Concurrency = 0
		if ticket, err = rt.admit(r, rte, &preq, class, tenant, rec); err != nil {
			return err
		}
	}
	span := rt.stageSpan(r.Context(), "limit")
	res, err := rt.limiter.Reserve(r.Context(), tenant.Name, lim, ask)
	endLimit(span, tenant, res, err)
	if err != nil {
		ticket.Release()
		var re *quota.RejectError
		if errors.As(err, &re) {
			setRateHeaders(w.Header(), re.Decision)
		}
		return err
	}
	setRateHeaders(w.Header(), res.Decision)
	if !rec.batch {
		if ticket, err = rt.admit(r, rte, &preq, class, tenant, rec); err != nil {
			rt.limiter.Settle(res, quota.Amount{Requests: 1}) // never ran: its tokens come back
			return err
		}
	}
	rec.admitted(ticket)
	defer ticket.Release()
	strip := false
	if req.stream && !req.includeUsage && r.URL.Path != responsesPath { // a response's stream ends with its usage
		if b, injected, err := usage.AskUsage(body); err == nil {
			body, strip = b, injected
		}
	}
	// Deferred: a stream the backend breaks off ends this handler with a
	// panic (http.ErrAbortHandler), and it must settle all the same.
	defer func() {
		used := quota.Amount{Requests: 1}
		if out.Status/100 == 2 { // an answer was relayed: charge what it used; an error costs its request only
			used.Input, used.Output = int64(out.PromptTokens), int64(out.CompletionTokens)
			if !out.UsageExact {
				used.Input = int64(req.promptTokens)
			}
		}
		rt.limiter.Settle(res, used)
		rt.metrics.tenantTokens(tenant.Name, tenant.Tier, used.Input, used.Output)
	}()
	return rt.forward(w, r, rte, &preq, body, bodyModel, strip, ticket, rec)
}

// fallback returns the route that takes rte's requests while none of its
// endpoints is in routing: its first fallback the tenant may use that has
// one; nil when rte has an endpoint in routing or no fallback does.
func (rt *Router) fallback(rte *Route, t *auth.Tenant) *Route {
	if len(rte.Fallbacks) == 0 {
		return nil
	}
	now := rt.now()
	if len(rte.Pool.Available(nil, now)) > 0 {
		return nil
	}
	table := rt.table.Load()
	for _, name := range rte.Fallbacks {
		fb := table.routes[name]
		if fb != nil && (t == nil || t.Allows(name)) && len(fb.Pool.Available(nil, now)) > 0 {
			return fb
		}
	}
	return nil
}

// serviceClass resolves the request's service_tier against its tenant's
// tier: "auto" or none is the tier's default class; a class the tier does
// not list is a 400. With no tenants every class is open, default
// "default".
func serviceClass(asked string, t *auth.Tenant) (admission.Class, error) {
	if asked == "" || asked == "auto" {
		if t == nil || t.DefaultClass == "" {
			return admission.Default, nil
		}
		asked = t.DefaultClass
	}
	c, ok := admission.ParseClass(asked)
	if !ok {
		return 0, badRequest("service_tier", "invalid_value",
			"service_tier must be one of auto, default, flex, priority; got "+strconv.Quote(echo(asked)))
	}
	if t != nil && len(t.Classes) > 0 && !slices.Contains(t.Classes, asked) {
		return 0, badRequest("service_tier", "invalid_value",
			"service_tier "+strconv.Quote(asked)+" is not available on your tier")
	}
	return c, nil
}

// admit runs the admission stage when the route has a gate: it waits until
// an endpoint has room (or sheds) and returns the ticket bound to it; nil
// without a gate.
func (rt *Router) admit(r *http.Request, rte *Route, preq *policies.Request, class admission.Class, t *auth.Tenant, rec *requestRecord) (ticket *admission.Ticket, err error) {
	if rte.Gate == nil {
		return nil, nil
	}
	start := rt.now()
	defer func() {
		if err != nil { // shed, refused, or its client left: how long it waited (its log line had no queued_ms)
			rec.queued, rec.gated = rt.now().Sub(start), true
		}
	}()
	ar := admission.Request{Class: class, Tokens: preq.ExpectedTokens(), Routing: preq, Weight: 1, Batch: rec.batch}
	if t != nil {
		ar.Tenant, ar.TierPriority, ar.Weight = t.Name, t.Priority, float64(max(t.Weight, 1))
	}
	span := rt.stageSpan(r.Context(), "admission")
	ticket, err = rte.Gate.Admit(r.Context(), ar)
	endAdmission(span, class, ticket, err)
	var shed *admission.ShedError
	switch {
	case errors.As(err, &shed):
		rt.metrics.shed.WithLabelValues(preq.Model, class.String(), shed.Reason).Inc()
		return nil, err
	case errors.Is(err, policies.ErrNoEndpoint):
		return nil, &noBackendError{retryAfter: rt.soonestBack(rte.Pool)}
	case err != nil:
		return nil, err
	case rt.closing.Load(): // bound as the drain ended: the server is about to close
		ticket.Release()
		return nil, errShuttingDown
	}
	rt.metrics.admitted(preq.Model, class.String(), ticket.Waited())
	return ticket, nil
}

// forward picks and proxies, retrying endpoints that could not be reached.
// It leaves the last attempt's backend and outcome in rec (also when the
// attempt panics with http.ErrAbortHandler) and returns nil once a
// response was relayed, or the error to show the client. bodyModel is the
// "model" in body, which each attempt rewrites to the name its backend
// serves the route's model under when that differs.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, rte *Route, preq *policies.Request, body []byte, bodyModel string, strip bool, ticket *admission.Ticket, rec *requestRecord) error {
	out := &rec.out
	send, sendModel := body, bodyModel // what an attempt sends, and the "model" in it
	if preq.ServiceTier != "" {
		w = measure.NewTierWriter(w, preq.ServiceTier) // the answer names the class that served it
	}
	fb := rte.FirstByteTimeout
	if rec.batch {
		fb *= batchFirstByteFactor
	}
	var tried []*backends.Endpoint
	retryReason := "" // why the attempt before did not answer
	// When the retries find nowhere to go, the client hears what the
	// backends said, not "could not be reached" (a 503 with its
	// Retry-After, or a first-byte timeout, became 502 upstream_unavailable):
	// busy is a 502, 503 or 429 turned back for a retry, last the latest
	// failed attempt (a timeout followed by a refused connection answers
	// the timeout's 504).
	var busy, last *upstreamError
	failed := func(e *upstreamError) error {
		switch {
		case e != nil && e.class != backends.ClassUnreachable:
			return e
		case busy != nil:
			return busy
		case last != nil: // a backend reached says more than one not
			return last
		case e != nil:
			return e
		}
		return &upstreamError{class: backends.ClassUnreachable}
	}
	rt.retryBudget.deposit()
	for attempt := 0; attempt <= rt.retries; attempt++ {
		now := rt.now()
		var ep *backends.Endpoint
		others := false // another endpoint than ep is in routing (worth a retry)
		pick, candidates := rt.stageSpan(r.Context(), "pick"), 0
		switch {
		case ticket != nil && attempt == 0:
			ep = ticket.Endpoint() // admission bound it already
		case ticket != nil:
			if err := ticket.Rebind(r.Context(), preq, tried); err != nil {
				endPick(pick, rte, nil, 0, true, preq.Pin != nil)
				var shed *admission.ShedError
				switch {
				case errors.As(err, &shed): // no room came within its class's wait
					rt.metrics.shed.WithLabelValues(preq.Model, shed.Class.String(), shed.Reason).Inc()
					return err
				case r.Context().Err() != nil:
					return &upstreamError{class: backends.ClassClientGone}
				}
				return failed(nil)
			}
			ep = ticket.Endpoint()
		default:
			cands := rte.Pool.Available(nil, now)
			if len(tried) > 0 {
				cands = without(cands, tried)
			}
			if pin := preq.Pin; pin != nil {
				// Only where its stored response is.
				cands = cands[:0:0]
				if pin.Available(now) && !slices.Contains(tried, pin) {
					cands = []*backends.Endpoint{pin}
				}
			}
			if len(cands) == 0 {
				break
			}
			others = len(cands) > 1 // cands holds neither the endpoints tried nor a second ep
			candidates = len(cands)
			var err error
			if ep, err = rte.Picker.Pick(r.Context(), preq, cands); err != nil {
				ep = nil
			}
		}
		endPick(pick, rte, ep, candidates, ticket != nil, preq.Pin != nil)
		if ep == nil {
			break
		}
		var pass *backends.Pass
		if b := ep.Breaker(); b != nil {
			var ok bool
			if pass, ok = b.Allow(); !ok { // open, or half-open with its probes out
				if preq.Pin != nil { // nowhere else to go
					return storeUnavailable(ep, now)
				}
				tried = append(tried, ep)
				retryReason = "breaker_open"
				continue
			}
		}
		// A 502, 503 or 429 is turned back (not relayed) while another
		// attempt may follow; the last attempt relays whatever it gets.
		if ticket != nil && attempt < rt.retries && preq.Pin == nil {
			others = rt.another(rte, ep, tried, now)
		}
		// The budget is asked before the attempt, and the retry taken only
		// if one follows: an answer turned back with no retry left to
		// follow it was lost (the client got 502 upstream_error in place
		// of the backend's own 503 and its Retry-After). Reserving it for
		// the attempt's length would hold the budget in flight.
		canRetry := attempt < rt.retries && others && rt.retryBudget.available()
		rec.backend, rec.sentAt = ep.Address(), now
		if rec.firstSent.IsZero() {
			rec.firstSent = now
		}
		if name := rte.servedName(ep); name != sendModel {
			// An alias, a fallback's backend, or a backend serving the
			// model under its own name: it gets the name it knows.
			send, sendModel = body, bodyModel
			if name != bodyModel {
				edited, err := usage.SetModel(body, name)
				if err != nil {
					return err
				}
				send, sendModel = edited, name
			}
		}
		at := proxy.Attempt{Target: ep.URL(), Authorization: ep.Authorization(), Body: send, TurnBack: canRetry, FirstByteTimeout: fb}
		if g := rte.Gate; g != nil && preq.Stream && g.MarksSteps() {
			steps := ep.StepReader()
			at.OnRead = func() {
				if steps.Read() {
					g.Stepped(ep) // the engine has the prompts sent before: the queue may send the next
				}
			}
		}
		aerr := rt.attempt(w, r, ep, preq, at, strip, out, pass, ticket, attempt+1, retryReason, rec.storeResponse)
		if aerr == nil {
			return nil
		}
		if out.Class == backends.ClassUnreachable && ep.MarkFailed(now, rt.cooldown) {
			rt.log.Warn("backend unreachable; holding it out", "backend", ep.Address(),
				"cooldown", rt.cooldown.String(), "err", aerr)
		}
		if !retryable(aerr) || !canRetry {
			return failed(&upstreamError{class: out.Class, err: aerr})
		}
		last = &upstreamError{class: out.Class, err: aerr}
		if ae := (*proxy.AttemptError)(nil); errors.As(aerr, &ae) && ae.Outcome == proxy.TurnedBack {
			busy = &upstreamError{class: backends.ClassUpstream4xx, err: aerr, retryAfter: ae.RetryAfter}
		}
		rt.retryBudget.take()
		rt.metrics.retries.WithLabelValues(out.Class.String()).Inc()
		tried = append(tried, ep)
		retryReason = out.Class.String()
	}
	if len(tried) > 0 {
		return failed(nil)
	}
	return &noBackendError{retryAfter: rt.soonestBack(rte.Pool)}
}

// batchRoutePrefix marks a Batch API line's route in metrics and logs
// ("batch:/v1/chat/completions").
const batchRoutePrefix = "batch:"

// batchFirstByteFactor widens the model's first-byte timeout for a Batch
// API line: its answer is whole (never streamed), may be long, and runs in
// what interactive work leaves. The six lines the first 20,000-line live
// run lost (three failed attempts each) were among its longest answers,
// 550-940 output tokens, which on a busy L4 can take longer than the 60s
// default.
const batchFirstByteFactor = 10

// attempt sends one request to ep as at says, leaves its outcome in out
// and returns the error when nothing was relayed to the client.
//
// pass, when set, is the breaker's: told when the answer begins and how the attempt ended; ticket, when
// admission bound the request, is told when the attempt starts and when a
// stream's first token arrives (its prefill bounds count both).
//
// With at.TurnBack, a 502, 503 or 429 answer is not relayed: the attempt
// fails with it, so that the caller can try another backend.
//
// n numbers the attempt from 1, and retryReason says why the one before
// did not answer; both are for its span. store: the answer is a Responses
// API response its backend stores, whose id Sluice remembers there.
func (rt *Router) attempt(w http.ResponseWriter, r *http.Request, ep *backends.Endpoint, preq *policies.Request, at proxy.Attempt, strip bool, out *backends.Outcome, pass *backends.Pass, ticket *admission.Ticket, n int, retryReason string, store bool) (err error) {
	reqSpan := trace.SpanFromContext(r.Context())
	ctx, span := rt.startSpan(r.Context(), "upstream", trace.SpanKindClient)
	if span.IsRecording() {
		r = r.WithContext(ctx)
		startAttempt(span, ep, n, retryReason)
	}
	start := rt.now()
	var att backends.Attempt
	if preq.Stream {
		att = ep.Start(int64(preq.PromptTokens), preq.ExpectedTokens())
	} else {
		att = ep.StartWhole(int64(preq.PromptTokens), preq.ExpectedTokens())
	}
	ticket.Started()
	*out = backends.Outcome{Class: backends.ClassFailed} // kept if Forward panics with http.ErrAbortHandler mid-stream
	mw := measure.NewWriter(w, start, rt.relayClock)
	mw.StripUsageChunk = strip
	if r.URL.Path == responsesPath {
		mw.Responses, at.Ended = true, mw.ResponseEnded
		if store { // where the stored response lives (stored.go)
			mw.OnResponseID = func(id string) {
				rt.rememberResponse(r.Context(), id, respindex.Owner{Model: preq.Model, Backend: ep.Address(), Tenant: preq.Tenant})
			}
		}
	}
	var whole time.Duration // a non-streamed answer's first byte
	if preq.Stream && ticket != nil {
		// After the flush: with a shared store it is a round trip.
		mw.AfterFirstFlush = ticket.Prefilled
	}
	mw.OnFirstByte = func() {
		now := rt.now()
		ep.MarkAnswered(now) // alive, whatever its scrapes say
		if pass != nil {
			pass.Answered() // a probe has shown enough
		}
		if preq.Stream {
			att.FirstToken(now.Sub(start))
		} else {
			whole = now.Sub(start) // a whole answer: its first byte is not a first token
		}
	}
	returned := false // Forward returned rather than panicked
	defer func() {
		res := mw.Result()
		if !returned && (ctx.Err() != nil || res.ClientFailed) {
			// The client hung up mid-answer, or stopped reading it past the
			// write deadline: the backend did nothing wrong (a stalled
			// client was counted a failure against its breaker).
			out.Class = backends.ClassClientGone
		}
		fillOutcome(out, res)
		rt.metrics.attempted(ep.Address(), out.Class.String())
		endAttempt(span, out, err)
		if err == nil { // relayed (or broken off mid-stream): the request's answer
			traceAnswer(reqSpan, out)
		}
		if pass != nil {
			pass.Done(out.Class)
		}
		if whole > 0 && out.Class == backends.ClassOK {
			att.WholeAnswer(whole, int64(out.CompletionTokens))
		}
		att.Finish(*out) // last: once in-flight drops, the attempt is fully recorded
	}()
	err = rt.proxy.Forward(mw, r, at)
	returned = true
	var cut *proxy.StreamCutError
	if err == nil || errors.As(err, &cut) {
		_ = mw.Finish() // relays the rest of an event a stream ended inside; the client may be gone
	}
	if cut != nil {
		// The stream broke after it started: tell the client in OpenAI's
		// shape rather than end it as if it were whole. Written past the
		// measuring writer: it is not the backend's answer.
		_, _ = w.Write(proxy.ErrorEvent(cut))
		_ = http.NewResponseController(w).Flush()
		out.Class = backends.ClassFailed
		switch {
		case cut.Stalled:
			out.Class = backends.ClassTimeout
		case errors.Is(cut.Err, proxy.ErrTotalTimeout):
			out.Class = backends.ClassRequestTimeout // the request's own time ran out, not the backend's fault
		}
		rt.log.Warn("stream cut", "backend", ep.Address(), "err", cut.Err)
		return nil
	}
	out.Class = classify(err, mw.Result().Status)
	if out.Class == backends.ClassClientGone && errors.Is(context.Cause(r.Context()), proxy.ErrTotalTimeout) {
		out.Class = backends.ClassRequestTimeout // before the answer started: the client had not left either
	}
	if err == nil && ep.MarkHealthy() {
		rt.log.Info("backend reachable again", "backend", ep.Address())
	}
	return err
}

// fillOutcome copies what the writer measured into out.
func fillOutcome(out *backends.Outcome, m measure.Result) {
	out.Status = m.Status
	out.TTFT = m.TTFT
	out.DecodeTokens, out.Decode = m.Tokens, m.Decode
	out.ResponseID = m.ResponseID
	out.PromptTokens, out.CompletionTokens, out.UsageExact = m.PromptTokens, m.CompletionTokens, m.UsageExact
	if !m.UsageExact {
		out.CompletionTokens = m.Relayed
	}
}

// another reports whether an endpoint other than ep and those tried is in
// routing: only then is a retry worth turning an answer back for.
func (rt *Router) another(rte *Route, ep *backends.Endpoint, tried []*backends.Endpoint, now time.Time) bool {
	for _, e := range rte.Pool.Available(nil, now) {
		if e != ep && !slices.Contains(tried, e) {
			return true
		}
	}
	return false
}

// retryable reports whether a failed attempt may be tried on another
// backend: nothing reached the client, and the backend could not be
// reached, did not answer in time, failed before its first byte, or turned
// the request back (502, 503, 429). A client that left is never retried.
func retryable(err error) bool {
	var ae *proxy.AttemptError
	return errors.As(err, &ae) && ae.Outcome != proxy.ClientGone && ae.Outcome != proxy.LocalLimit
}

// classify names how an attempt ended from Forward's error and the status
// relayed.
func classify(err error, status int) backends.ErrorClass {
	if err == nil {
		switch {
		case status >= 500:
			return backends.ClassUpstream5xx
		case status >= 400:
			return backends.ClassUpstream4xx
		}
		return backends.ClassOK
	}
	var ae *proxy.AttemptError
	if !errors.As(err, &ae) {
		return backends.ClassFailed
	}
	switch ae.Outcome {
	case proxy.Unreachable:
		return backends.ClassUnreachable
	case proxy.Timeout:
		return backends.ClassTimeout
	case proxy.ClientGone:
		return backends.ClassClientGone
	case proxy.LocalLimit:
		return backends.ClassLocal
	case proxy.TurnedBack:
		if ae.Status == http.StatusTooManyRequests {
			return backends.ClassUpstream4xx
		}
		return backends.ClassUpstream5xx
	}
	return backends.ClassFailed
}

// soonestBack is how long until the first held-out endpoint returns.
func (rt *Router) soonestBack(p *backends.Pool) time.Duration {
	now := rt.now()
	best := time.Duration(0)
	for _, e := range p.Endpoints() {
		if at := e.AvailableAt(); !at.IsZero() {
			if d := at.Sub(now); d > 0 && (best == 0 || d < best) {
				best = d
			}
		}
	}
	if best == 0 {
		best = time.Second
	}
	return best
}

func without(eps, drop []*backends.Endpoint) []*backends.Endpoint {
	out := make([]*backends.Endpoint, 0, len(eps))
	for _, e := range eps {
		skip := false
		for _, d := range drop {
			if e == d {
				skip = true
				break
			}
		}
		if !skip {
			out = append(out, e)
		}
	}
	return out
}

// readBody reads the whole body under the size limit.
func (rt *Router) readBody(w http.ResponseWriter, r *http.Request, counted *budgeted) ([]byte, error) {
	if r.ContentLength > rt.maxBody {
		return nil, bodyTooLarge(rt.maxBody)
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Read as JSON it would be "invalid JSON"; forwarded, the backend
		// (vLLM and the others take plain JSON) would say the same.
		return nil, &APIError{Status: http.StatusUnsupportedMediaType, Type: typeInvalidRequest, Code: "unsupported_content_encoding",
			Message: "Content-Encoding " + strconv.Quote(echo(ce)) + " is not supported: send the request body uncompressed."}
	}
	// The buffer grows with what arrives, never from the declared
	// Content-Length (see proxy.ReadBody).
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(rt.bodyWait)) == nil
	counted.r = http.MaxBytesReader(w, r.Body, rt.maxBody)
	body, err := rt.proxy.ReadBody(counted)
	if deadline && err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		// The deadline stays past, and the connection closes after the
		// answer: the server would otherwise read what is left of a
		// declared body (up to 256 KB) before sending the error, at the
		// pace of the client that stalled.
		if deadline {
			_ = rc.SetReadDeadline(time.Now())
		}
		w.Header().Set("Connection", "close")
		if errors.Is(err, errBodiesFull) {
			return nil, errBodiesFull
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, bodyTooLarge(rt.maxBody)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Not a malformed body: a slow one. 408 tells the SDKs (which
			// retry it) and the client's logs what happened.
			return nil, &APIError{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: "request_timeout",
				Message: "The request body did not arrive within " + rt.bodyWait.String() + "."}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			// The connection closed before the declared body arrived:
			// the client left (logged 499), it did not send a bad request.
			return nil, errClientLeft
		}
		return nil, badRequest("", "invalid_body", "The request body could not be read.")
	}
	return body, nil
}

// finish writes err (if any, and if the client is still there) as the
// client's answer, then records the request's metrics and its log line.
// The status recorded is the one the client got: the error's, or the
// relayed answer's own.
func (rt *Router) finish(w http.ResponseWriter, r *http.Request, rec *requestRecord, err error) {
	route := r.URL.Path
	if rec.batch {
		// A Batch API line: its 429s and retries are the batch runner's,
		// kept apart from what clients see.
		route = batchRoutePrefix + route
	}
	code, errCode := http.StatusOK, ""
	switch {
	case !rec.returned && rec.out.Class == backends.ClassClientGone: // the client left or stalled mid-answer
		code, errCode = statusClientClosed, "client_closed"
	case !rec.returned: // panicked: the answer was cut short
		code, errCode = cmp.Or(rec.out.Status, http.StatusInternalServerError), "response_aborted"
	case err != nil:
		if rt.closing.Load() && r.Context().Err() != nil && rec.out.Status == 0 {
			err = errShuttingDown // ended by the server's drain deadline, not by its client
		}
		apiErr := errorFor(err)
		code, errCode = apiErr.Status, apiErr.Code
		if code != statusClientClosed {
			writeError(w, apiErr)
		} else {
			errCode = "client_closed"
		}
		if code >= 500 {
			rt.log.Warn("request failed", "status", code, "model", rec.model, "route", route,
				"request_id", middleware.RequestIDFrom(r.Context()), "err", err)
		}
	case rec.out.Status != 0:
		code = rec.out.Status
		// An answer cut after its status was sent: the client got a 200
		// and then an error event, whose code the line must not hide.
		switch {
		case code >= 400:
			// The backend's error, relayed: its class names it in the log
			// (the line had no error for a relayed 500).
			errCode = rec.out.Class.String()
		case rec.timedOut:
			errCode = "request_timeout"
		case rt.closing.Load() && rec.out.Class == backends.ClassFailed:
			errCode = "server_shutting_down" // the error event EndStreams sent
		case rec.out.Class == backends.ClassFailed:
			errCode = "upstream_error"
		case rec.out.Class == backends.ClassTimeout:
			errCode = "upstream_timeout"
		}
	}
	elapsed := rt.now().Sub(rec.start)
	rt.metrics.observe(route, code, elapsed, rec)
	rt.logRequest(r.Context(), route, code, errCode, elapsed, rec)
	traceUsage(r.Context(), rec)
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (rt *Router) model(name string) modelObject {
	return modelObject{ID: name, Object: "model", Created: rt.created, OwnedBy: "sluice"}
}

func (rt *Router) listModels(w http.ResponseWriter, r *http.Request) {
	tenant, err := rt.tenants.Load().Authenticate(r)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	t := rt.table.Load()
	out := struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{Object: "list", Data: make([]modelObject, 0, len(t.names))}
	for _, name := range t.names { // each model, then its aliases
		if tenant == nil || tenant.Allows(t.routes[name].Pool.Model()) {
			out.Data = append(out.Data, rt.model(name))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (rt *Router) getModel(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "*")
	if raw := r.URL.RawPath; raw != "" { // an escaped slash (%2F) arrives decoded in Path
		if unescaped, err := url.PathUnescape(strings.TrimPrefix(raw, "/v1/models/")); err == nil {
			name = unescaped
		}
	}
	if name == "" { // GET /v1/models/: no model named, so no such route
		writeError(w, noRoute(r))
		return
	}
	tenant, err := rt.tenants.Load().Authenticate(r)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if rte := rt.table.Load().routes[name]; rte == nil || (tenant != nil && !tenant.Allows(rte.Pool.Model())) {
		writeError(w, errorFor(&modelNotFoundError{model: name}))
		return
	}
	writeJSON(w, http.StatusOK, rt.model(name))
}

func (rt *Router) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 503 when no model has an endpoint in routing, or while the
// limit store fails and limits fail closed (every request would get 503);
// else 200, naming the models that have none. A model without backends
// is the same on every replica: were one such model to make each replica
// unready, draining its last backend would take the models that serve out
// of every load balancer too. Failing open, a down store leaves the
// replica serving, so ready.
func (rt *Router) readyz(w http.ResponseWriter, _ *http.Request) {
	t := rt.table.Load()
	now := rt.now()
	var down []string
	for _, name := range t.order {
		if len(t.routes[name].Pool.Available(nil, now)) == 0 {
			down = append(down, name)
		}
	}
	if len(down) == len(t.order) {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "models_without_backends": down})
		return
	}
	if rt.limiter != nil && !rt.tenants.Load().Open() && !rt.limiter.Healthy() && rt.limiter.FailsClosed() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "limit_store": "down; limits fail closed"})
		return
	}
	if len(down) > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "models_without_backends": down})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
