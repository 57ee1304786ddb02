package router

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/middleware"
)

// requestRecord is what the pipeline learnt of one inference request, filled
// in as its stages run; finish reads it for the request's metrics and its
// log line.
type requestRecord struct {
	start time.Time
	// model is the model asked for, once it is known to be served ("" before).
	model string
	// promptEstimate is the router's prompt-size estimate, counted as the
	// input when the backend reported no usage (as settlement does).
	promptEstimate int
	// tenant is nil without tenants, and before authentication.
	tenant *auth.Tenant
	// class is the service class, "" before it is known.
	class string
	// batch marks a Batch API line (admission.IsBatch), read once.
	batch bool
	// backend is the address of the endpoint of the last attempt, and
	// sentAt when that attempt began; "" and zero when none was made.
	backend string
	sentAt  time.Time
	// firstSent is when the first attempt began (zero when none did).
	firstSent time.Time
	// queued is how long the request waited in the admission queue, and
	// gated whether it went through one (a route with a gate).
	queued time.Duration
	gated  bool
	// out is the last attempt's outcome.
	out backends.Outcome
	// timedOut: the request's total timeout ended its answer after the
	// status was sent (the stream's error event said request_timeout).
	timedOut bool
	// returned is set once the pipeline returned; a handler that ends
	// without it panicked (a whole answer cut short).
	returned bool
	// storeResponse: a Responses API request whose response the backend
	// stores (store not false), whose backend Sluice remembers
	// (rememberResponse).
	storeResponse bool
}

// ttft is the time from the request's arrival to the first byte of a
// streamed answer, 0 when there was none.
func (rec *requestRecord) ttft() time.Duration {
	if rec.out.TTFT <= 0 {
		return 0
	}
	return rec.sentAt.Sub(rec.start) + rec.out.TTFT
}

// overhead is what Sluice spent on the request before its first attempt
// began (reading and checking it, the tenant's limits, admission and the
// pick), less its wait in the admission queue; 0 when no attempt began.
func (rec *requestRecord) overhead() time.Duration {
	if rec.firstSent.IsZero() {
		return 0
	}
	return max(rec.firstSent.Sub(rec.start)-rec.queued, 0)
}

// inputTokens is the answer's input: the usage the backend reported, else
// the router's estimate.
func (rec *requestRecord) inputTokens() int {
	if rec.out.UsageExact {
		return rec.out.PromptTokens
	}
	if rec.out.Status/100 == 2 {
		return rec.promptEstimate
	}
	return 0
}

// logRequest writes the request's one line: at Info, message "request",
// with its ID, tenant, model, service class, the backend that answered,
// the status, the tokens, the time it waited in the admission queue (on a
// route with admission), the time to first token (streams only) and the
// latency. errCode is the OpenAI error code answered, "" for none; for a
// backend's error relayed as it came, its outcome ("upstream_5xx",
// "upstream_4xx"), and for an answer that broke off after its status was
// sent, "upstream_error" (the code of the error event that ended it).
// Nothing in it is the client's own text except the request ID, which the
// RequestID middleware accepts only when it is short printable ASCII.
func (rt *Router) logRequest(ctx context.Context, route string, status int, errCode string, elapsed time.Duration, rec *requestRecord) {
	l := rt.requestLog
	if l == nil || !l.Enabled(ctx, slog.LevelInfo) {
		return
	}
	tenant := ""
	if rec.tenant != nil {
		tenant = rec.tenant.Name
	}
	attrs := [...]slog.Attr{
		slog.String("request_id", middleware.RequestIDFrom(ctx)),
		slog.String("route", route),
		slog.String("tenant", tenant),
		slog.String("model", rec.model),
		slog.String("class", rec.class),
		slog.String("backend", rec.backend),
		slog.Int("status", status),
		slog.Int("input_tokens", rec.inputTokens()),
		slog.Int("output_tokens", rec.out.CompletionTokens),
		slog.Float64("latency_ms", millis(elapsed)),
		{}, // queued_ms
		{}, // overhead_ms
		{}, // ttft_ms
		{}, // error
		{}, // response_id
	}
	n := len(attrs) - 5
	if rec.gated {
		attrs[n] = slog.Float64("queued_ms", millis(rec.queued))
		n++
	}
	if !rec.firstSent.IsZero() {
		attrs[n] = slog.Float64("overhead_ms", millis(rec.overhead()))
		n++
	}
	if d := rec.ttft(); d > 0 {
		attrs[n] = slog.Float64("ttft_ms", millis(d))
		n++
	}
	if errCode != "" {
		attrs[n] = slog.String("error", errCode)
		n++
	}
	if id := rec.out.ResponseID; id != "" {
		attrs[n] = slog.String("response_id", id) // a Responses API answer's
		n++
	}
	l.LogAttrs(ctx, slog.LevelInfo, "request", attrs[:n]...)
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// admitted notes the admission stage's ticket (nil on a route without a
// gate): how long the request waited in the queue.
func (rec *requestRecord) admitted(t *admission.Ticket) {
	if t != nil {
		rec.queued, rec.gated = t.Waited(), true
	}
}
