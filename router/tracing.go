package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/proxy"
)

// A request's trace is its server span (router/middleware), with one child
// per pipeline stage it reached: "limit", "admission", "pick" (one per
// attempt) and "upstream" (one per attempt, the parent of the backend's
// spans through W3C traceparent).
//
// Tracing off must cost nothing measurable: a stage of a request whose span
// is not recording starts no span, and attributes, whose building
// allocates, are set only on a recording span.

// Attribute keys of Sluice's own; the rest are OpenTelemetry semantic
// conventions (gen_ai.*, http.*).
const (
	attrTenant         = attribute.Key("sluice.tenant")
	attrTier           = attribute.Key("sluice.tier")
	attrClass          = attribute.Key("sluice.class")
	attrFallback       = attribute.Key("sluice.fallback_model")
	attrBackend        = attribute.Key("sluice.backend")
	attrOutcome        = attribute.Key("sluice.outcome")
	attrAttempt        = attribute.Key("sluice.attempt")
	attrRetryReason    = attribute.Key("sluice.retry_reason")
	attrPolicy         = attribute.Key("sluice.policy")
	attrCandidates     = attribute.Key("sluice.pick.candidates")
	attrByAdmission    = attribute.Key("sluice.pick.by_admission")
	attrPinned         = attribute.Key("sluice.pick.pinned")
	attrLimitDecision  = attribute.Key("sluice.limit.decision")
	attrLimitDenied    = attribute.Key("sluice.limit.denied")
	attrLimitRetry     = attribute.Key("sluice.limit.retry_after_ms")
	attrLimitRequests  = attribute.Key("sluice.limit.requests_remaining")
	attrLimitTokens    = attribute.Key("sluice.limit.tokens_remaining")
	attrAdmitOutcome   = attribute.Key("sluice.admission.outcome")
	attrAdmitReason    = attribute.Key("sluice.admission.reason")
	attrAdmitWaitedMS  = attribute.Key("sluice.admission.waited_ms")
	attrUpstreamStatus = semconv.HTTPResponseStatusCodeKey
)

// injectTraceContext writes the current span's W3C trace context into an
// upstream request's headers, replacing whatever the client sent, so the
// backend's spans hang under Sluice's attempt span.
func injectTraceContext(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// startSpan starts a stage's span as a child of the request's span in ctx
// and returns the context holding it. When the request's span is not
// recording (tracing off, or the trace sampled out) it starts nothing: it
// returns ctx unchanged and a no-op span, without allocating.
func (rt *Router) startSpan(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return rt.attempts.Start(ctx, name, trace.WithSpanKind(kind))
}

// stageSpan is startSpan for a stage whose callees need no span context.
func (rt *Router) stageSpan(ctx context.Context, name string) trace.Span {
	_, span := rt.startSpan(ctx, name, trace.SpanKindInternal)
	return span
}

// traceRequest records what routing learnt of the request on its span:
// the model asked for (and the one serving it, after a fallback), the
// tenant and tier (with tenants) and the service class.
func traceRequest(ctx context.Context, asked, served string, t *auth.Tenant, class string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.GenAIRequestModel(asked), attrClass.String(class))
	if served != asked {
		span.SetAttributes(attrFallback.String(served))
	}
	if t != nil {
		span.SetAttributes(attrTenant.String(t.Name), attrTier.String(t.Tier))
	}
}

// traceAnswer records, on the request's span, the status of the answer an
// attempt relayed and its token counts (the input count only when the
// backend reported its usage).
func traceAnswer(span trace.Span, out *backends.Outcome) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(out.Status))
	switch {
	case out.Status >= 500:
		span.SetStatus(codes.Error, "")
	case out.Status/100 == 2 && out.Class != backends.ClassOK && out.Class != backends.ClassClientGone:
		// A stream that broke after its 200 (the client got an error
		// event): its span read as a success.
		span.SetStatus(codes.Error, out.Class.String())
	}
	if out.Status/100 != 2 {
		return
	}
	span.SetAttributes(semconv.GenAIUsageOutputTokens(out.CompletionTokens))
	if out.UsageExact {
		span.SetAttributes(semconv.GenAIUsageInputTokens(out.PromptTokens))
	}
}

// traceUsage records on the request's span the tokens its log line
// counts, whatever the answer's end: a stream its client left (499) or
// broken off had none, and a stream without usage from the backend no
// input count.
func traceUsage(ctx context.Context, rec *requestRecord) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() || rec.out.Status/100 != 2 {
		return
	}
	span.SetAttributes(semconv.GenAIUsageOutputTokens(rec.out.CompletionTokens))
	if n := rec.inputTokens(); n > 0 {
		span.SetAttributes(semconv.GenAIUsageInputTokens(n))
	}
}

// traceFailure records, on the request's span, the status of the error
// answered instead of a backend's answer.
func traceFailure(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if err == nil || !span.IsRecording() {
		return
	}
	code := errorFor(err).Status
	span.SetAttributes(semconv.HTTPResponseStatusCode(code))
	if code >= 500 {
		span.SetStatus(codes.Error, err.Error())
	}
}

// endLimit ends the limit stage's span with its decision: allowed,
// denied (and the limit that refused), failed_open or failed_closed (the
// store failed), or client_gone.
func endLimit(span trace.Span, t *auth.Tenant, res *quota.Reservation, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrTenant.String(t.Name), attrTier.String(t.Tier))
	var re *quota.RejectError
	switch {
	case errors.As(err, &re):
		span.SetAttributes(attrLimitDecision.String("denied"), attrLimitDenied.String(string(re.Dimension)),
			attrLimitRetry.Int64(re.RetryAfter.Milliseconds()))
	case errors.Is(err, quota.ErrUnavailable):
		span.SetAttributes(attrLimitDecision.String("failed_closed"))
		span.SetStatus(codes.Error, err.Error())
	case err != nil:
		span.SetAttributes(attrLimitDecision.String("client_gone"))
	case !res.Decision.Allowed: // a zero Decision: the store failed open
		span.SetAttributes(attrLimitDecision.String("failed_open"))
	default:
		span.SetAttributes(attrLimitDecision.String("allowed"))
		if d := res.Decision; d.Requests.Limit > 0 {
			span.SetAttributes(attrLimitRequests.Int64(d.Requests.Remaining))
		}
		if d := res.Decision; d.Tokens.Limit > 0 {
			span.SetAttributes(attrLimitTokens.Int64(d.Tokens.Remaining))
		}
	}
}

// endAdmission ends the admission stage's span with its outcome: admitted
// (after waiting how long), shed (and why), no_endpoint or client_gone.
// A request shed or gone after a wait shows it as the span's length.
func endAdmission(span trace.Span, class admission.Class, ticket *admission.Ticket, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrClass.String(class.String()))
	var shed *admission.ShedError
	switch {
	case err == nil:
		span.SetAttributes(attrAdmitOutcome.String("admitted"),
			attrAdmitWaitedMS.Float64(float64(ticket.Waited().Microseconds())/1000))
	case errors.As(err, &shed):
		span.SetAttributes(attrAdmitOutcome.String("shed"), attrAdmitReason.String(shed.Reason))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		span.SetAttributes(attrAdmitOutcome.String("client_gone"))
	default:
		span.SetAttributes(attrAdmitOutcome.String("no_endpoint"))
	}
}

// endPick ends a pick's span with the route's policy and the endpoint
// chosen (none: the span's status is an error). candidates is how many
// endpoints the policy chose from, 0 when the admission gate chose (then
// byGate is set) and the count is not known here. No policy exposes an
// endpoint's score, so none is recorded.
func endPick(span trace.Span, rte *Route, ep *backends.Endpoint, candidates int, byGate, pinned bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	policy := rte.Policy
	if policy == "" {
		policy = fmt.Sprintf("%T", rte.Picker)
	}
	span.SetAttributes(attrPolicy.String(policy))
	if candidates > 0 {
		span.SetAttributes(attrCandidates.Int(candidates))
	}
	if byGate {
		span.SetAttributes(attrByAdmission.Bool(true))
	}
	if pinned { // the backend holding the stored response it continues
		span.SetAttributes(attrPinned.Bool(true))
	}
	if ep == nil {
		span.SetStatus(codes.Error, "no endpoint")
		return
	}
	span.SetAttributes(attrBackend.String(ep.Address()))
}

// startAttempt records on an upstream span which backend it goes to, its
// number (from 1) and, for a retry, why the attempt before did not answer.
func startAttempt(span trace.Span, ep *backends.Endpoint, n int, retryReason string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrBackend.String(ep.Address()), attrAttempt.Int(n))
	if retryReason != "" {
		span.SetAttributes(attrRetryReason.String(retryReason))
	}
}

// endAttempt ends an upstream span with the attempt's outcome and the
// status the backend answered (none when it could not be reached); err is
// the attempt's, nil when an answer was relayed.
func endAttempt(span trace.Span, out *backends.Outcome, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOutcome.String(out.Class.String()))
	status := out.Status
	var ae *proxy.AttemptError
	if errors.As(err, &ae) && ae.Status != 0 {
		status = ae.Status // turned back: nothing was relayed
	}
	if status != 0 {
		span.SetAttributes(attrUpstreamStatus.Int(status))
	}
	if err != nil || out.Class.BackendFault() || out.Class == backends.ClassRequestTimeout || status >= 400 {
		desc := out.Class.String()
		if err != nil {
			desc = err.Error()
		}
		span.SetStatus(codes.Error, desc)
	}
}
