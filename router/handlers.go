package router

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/router/measure"
	"github.com/sluice-llm/sluice/router/middleware"
	"github.com/sluice-llm/sluice/router/proxy"
)

// statusClientClosed is logged (never sent) when the client hung up first.
const statusClientClosed = 499

// inference serves the three OpenAI inference routes: parse once, pick an
// endpoint, proxy, and try another endpoint if the first cannot be reached.
func (rt *Router) inference(w http.ResponseWriter, r *http.Request) {
	start := rt.now()
	body, apiErr := rt.readBody(w, r)
	if apiErr != nil {
		rt.finish(w, r, "", start, apiErr)
		return
	}
	req, apiErr := parseInference(body)
	if apiErr != nil {
		rt.finish(w, r, "", start, apiErr)
		return
	}
	rte := rt.table.Load().routes[req.model]
	if rte == nil {
		rt.finish(w, r, "", start, &APIError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Param: "model", Code: "model_not_found",
			Message: "The model `" + req.model + "` does not exist or you do not have access to it."})
		return
	}
	session := r.Header.Get(rt.sessionHeader)
	if session == "" {
		session = req.user
	}
	preq := policies.Request{Model: req.model, Stream: req.stream, PromptTokens: req.promptTokens,
		MaxTokens: req.maxTokens, User: req.user, SessionKey: session, PrefixHashes: req.prefix,
		PrefixChunkTokens: prefixChunk / bytesPerToken}
	status := rt.forward(w, r, rte, &preq, body)
	rt.finish(w, r, req.model, start, status)
}

// forward picks and proxies, retrying unreachable endpoints. It returns nil
// once a response was relayed, or the error to show the client.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, rte *Route, preq *policies.Request, body []byte) *APIError {
	var tried []*backends.Endpoint
	var last *proxy.AttemptError
	for attempt := 0; attempt <= rt.retries; attempt++ {
		now := rt.now()
		cands := rte.Pool.Available(nil, now)
		if len(tried) > 0 {
			cands = without(cands, tried)
		}
		if len(cands) == 0 {
			break
		}
		ep, err := rte.Picker.Pick(r.Context(), preq, cands)
		if err != nil {
			break
		}
		err = rt.attempt(w, r, ep, preq, body)
		if err == nil {
			return nil
		}
		if !errors.As(err, &last) {
			return &APIError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_error", Message: "upstream error"}
		}
		switch last.Outcome {
		case proxy.ClientGone:
			return &APIError{Status: statusClientClosed, Message: "client closed request"}
		case proxy.Unreachable:
			if ep.MarkFailed(now, rt.cooldown) {
				rt.log.Warn("backend unreachable; holding it out", "backend", ep.Address(),
					"cooldown", rt.cooldown, "err", last.Err)
			}
			tried = append(tried, ep)
			continue
		case proxy.Timeout:
			return &APIError{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "upstream_timeout",
				Message: "the backend did not answer in time"}
		default:
			return &APIError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_error",
				Message: "the backend failed: " + last.Err.Error()}
		}
	}
	if last != nil {
		return &APIError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_unavailable",
			Message: "no backend for this model could be reached"}
	}
	return &APIError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "no_backend_available",
		Message: "no backend for this model is available", RetryAfter: rt.soonestBack(rte.Pool)}
}

// attempt sends one request to ep, keeping its in-flight count, and feeds
// the answer's measured TTFT and decode rate to the endpoint.
func (rt *Router) attempt(w http.ResponseWriter, r *http.Request, ep *backends.Endpoint, preq *policies.Request, body []byte) (err error) {
	ctx, span := rt.attempts.Start(r.Context(), "upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sluice.backend", ep.Address())))
	r = r.WithContext(ctx)
	g := rt.metrics.inFlight.WithLabelValues(ep.Address())
	tokens := preq.ExpectedTokens()
	prompt := int64(preq.PromptTokens)
	ep.Begin(tokens)
	ahead := policies.PrefillAhead(ep, prompt)
	ep.BeginPrefill(prompt)
	prefilling := true
	endPrefill := func() {
		if prefilling {
			prefilling = false
			ep.EndPrefill(prompt)
		}
	}
	g.Inc()
	outcome := "aborted" // kept if Forward panics with http.ErrAbortHandler mid-stream
	mw := measure.NewWriter(w, rt.now(), rt.now)
	mw.OnFirstByte = endPrefill
	defer func() {
		if outcome == "aborted" && ctx.Err() != nil {
			outcome = "client_gone" // the client hung up mid-stream; the backend did nothing wrong
		}
		if outcome == "ok" || outcome == "client_gone" {
			// A client often closes the moment it has read "data: [DONE]",
			// before the upstream body reports its end: what was relayed
			// until then is still a true measurement of the backend.
			observe(ep, ahead, preq.PromptTokens, mw.Result())
		}
		g.Dec()
		endPrefill()
		rt.metrics.attempts.WithLabelValues(ep.Address(), outcome).Inc()
		span.SetAttributes(attribute.String("sluice.outcome", outcome))
		span.End()
		ep.End(tokens) // last: once in-flight drops, the attempt is fully recorded
	}()
	err = rt.proxy.Forward(mw, r, ep.URL(), body)
	outcome = outcomeLabel(err)
	if err == nil && ep.MarkHealthy() {
		rt.log.Info("backend reachable again", "backend", ep.Address())
	}
	return err
}

// observe feeds a relayed answer's measurements to the endpoint's averages;
// prompt is the router's estimate of the prompt's tokens and ahead the
// prompt tokens pending on ep when it was sent.
func observe(ep *backends.Endpoint, ahead int64, prompt int, m measure.Result) {
	if m.TTFT > 0 {
		ep.ObserveTTFT(m.TTFT)
		ep.ObservePrefill(ahead, prompt, m.TTFT)
	}
	if m.Tokens > 0 {
		ep.ObserveDecode(m.Tokens, m.Decode)
	}
}

func outcomeLabel(err error) string {
	var ae *proxy.AttemptError
	if err == nil {
		return "ok"
	}
	if !errors.As(err, &ae) {
		return "failed"
	}
	switch ae.Outcome {
	case proxy.Unreachable:
		return "unreachable"
	case proxy.Timeout:
		return "timeout"
	case proxy.ClientGone:
		return "client_gone"
	default:
		return "failed"
	}
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
func (rt *Router) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	if r.ContentLength > rt.maxBody {
		return nil, bodyTooLarge(rt.maxBody)
	}
	rd := http.MaxBytesReader(w, r.Body, rt.maxBody)
	var body []byte
	var err error
	if r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, bodyTooLarge(rt.maxBody)
		}
		return nil, badRequest("", "invalid_body", "could not read the request body: "+err.Error())
	}
	return body, nil
}

// finish writes apiErr (if any, and if the client is still there) and
// records the request's metrics.
func (rt *Router) finish(w http.ResponseWriter, r *http.Request, model string, start time.Time, apiErr *APIError) {
	route := r.URL.Path
	code := http.StatusOK
	if apiErr != nil {
		code = apiErr.Status
		if code != statusClientClosed {
			writeError(w, apiErr)
		}
		if code >= 500 {
			rt.log.Warn("request failed", "status", code, "model", model, "route", route,
				"request_id", middleware.RequestIDFrom(r.Context()), "err", apiErr.Message)
		}
	}
	label := model
	if label == "" {
		label = "none" // unknown or unparsed: never echo client input into labels
	}
	rt.metrics.requests.WithLabelValues(label, route, strconv.Itoa(code)).Inc()
	rt.metrics.duration.WithLabelValues(label, route).Observe(rt.now().Sub(start).Seconds())
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

func (rt *Router) listModels(w http.ResponseWriter, _ *http.Request) {
	t := rt.table.Load()
	out := struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{Object: "list", Data: make([]modelObject, 0, len(t.order))}
	for _, name := range t.order {
		out.Data = append(out.Data, rt.model(name))
	}
	writeJSON(w, http.StatusOK, out)
}

func (rt *Router) getModel(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "model")
	if rt.table.Load().routes[name] == nil {
		writeError(w, &APIError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model",
			Code: "model_not_found", Message: "The model `" + name + "` does not exist or you do not have access to it."})
		return
	}
	writeJSON(w, http.StatusOK, rt.model(name))
}

func (rt *Router) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 200 when every model has at least one endpoint in routing, and
// 503 naming the models that have none.
func (rt *Router) readyz(w http.ResponseWriter, _ *http.Request) {
	t := rt.table.Load()
	now := rt.now()
	var down []string
	for _, name := range t.order {
		if len(t.routes[name].Pool.Available(nil, now)) == 0 {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "models_without_backends": down})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
