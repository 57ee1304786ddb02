package router_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// TestStoredResponsesReachTheBackendThatMadeThem: three gpuworkers keep
// the responses they make (as vLLM with its store on) behind a round-robin
// route, which would send each turn of a conversation to the next worker
// and so to one that never saw the response it continues (404). Sluice
// remembers where each stored response was made and sends the requests
// continuing it there, whole and streamed, with and without an admission
// queue; it serves GET and DELETE of a response from that worker too, and
// keeps each tenant's responses from the others.
func TestStoredResponsesReachTheBackendThatMadeThem(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "admission"}[gated], func(t *testing.T) {
			var urls []string
			for range 3 {
				w := startWorkerOpts(t, gpuworker.Options{Model: model, Profile: "instant", StoreResponses: 100})
				urls = append(urls, w.srv.URL)
			}
			spec := routeSpec{model: model, policy: roundrobin.Name, urls: urls}
			if gated {
				spec.budget = 4
			}
			opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro"}, &auth.Tenant{Name: "zeta", Tier: "pro"})
			var logs lockedBuffer
			opts.RequestLog = slog.New(slog.NewJSONHandler(&logs, nil))
			s := startSluice(t, opts, spec)
			acme, zeta := s.keyed(t, "sk-acme", 0), s.keyed(t, "sk-zeta", 0)
			ctx := context.Background()
			turn := func(prev string, text string) responses.ResponseNewParams {
				p := responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(8),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
				if prev != "" {
					p.PreviousResponseID = openai.String(prev)
				}
				return p
			}

			res, err := acme.Responses.New(ctx, turn("", "Tell me about the fleet."))
			require.NoError(t, err)
			first, prev, input := res.ID, res.ID, res.Usage.InputTokens
			for i := range 6 {
				if i%2 == 1 { // streamed: its id comes with response.completed
					stream := acme.Responses.NewStreaming(ctx, turn(prev, "And then?"))
					var done responses.Response
					for stream.Next() {
						if ev := stream.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
							done = ev.Response
						}
					}
					require.NoError(t, stream.Err(), "turn %d", i)
					require.NotEmpty(t, done.ID)
					res = &done
				} else {
					res, err = acme.Responses.New(ctx, turn(prev, "And then?"))
					require.NoError(t, err, "turn %d continues %s", i, prev)
				}
				assert.Equal(t, prev, res.PreviousResponseID)
				assert.Greater(t, res.Usage.InputTokens, input, "turn %d ran the conversation so far", i)
				prev, input = res.ID, res.Usage.InputTokens
			}

			lines := logs.lines(t)
			assert.Equal(t, prev, lines[len(lines)-1]["response_id"], "the request log names the response")
			got, err := acme.Responses.Get(ctx, first, responses.ResponseGetParams{})
			require.NoError(t, err)
			assert.Equal(t, first, got.ID)

			// Another tenant's response is not there for zeta, to read or
			// to continue.
			_, err = zeta.Responses.Get(ctx, first, responses.ResponseGetParams{})
			requireStatus(t, err, http.StatusNotFound, "not_found")
			_, err = zeta.Responses.New(ctx, turn(first, "Hijack."))
			requireStatus(t, err, http.StatusBadRequest, "previous_response_not_found")

			require.NoError(t, acme.Responses.Delete(ctx, first))
			_, err = acme.Responses.Get(ctx, first, responses.ResponseGetParams{})
			requireStatus(t, err, http.StatusNotFound, "not_found")

			// A response sent with store: false is kept nowhere: the request
			// continuing it goes where any would, and the worker there has
			// nothing to continue (its 404, relayed).
			p := turn("", "Forget this.")
			p.Store = openai.Bool(false)
			res, err = acme.Responses.New(ctx, p)
			require.NoError(t, err)
			_, err = acme.Responses.New(ctx, turn(res.ID, "Remember?"))
			requireStatus(t, err, http.StatusNotFound, "not_found")

			page := scrape(t, s)
			assert.Contains(t, page, `sluice_stored_responses_total{event="remembered"} 7`+"\n")
			assert.Contains(t, page, `sluice_stored_responses_total{event="pinned"} 8`+"\n", "six turns, a GET and a DELETE")
			assert.Contains(t, page, `sluice_stored_responses_total{event="unknown"} 2`+"\n", "the deleted one read again, the unstored one continued")
			if gated {
				assert.Zero(t, s.gates[0].Waiting())
			}
		})
	}
}

// TestAStoredResponsesBackendOutOfRoutingIsA503: while the backend holding
// a response is out of routing (unreachable, its breaker open), the
// request continuing it gets a 503 with the time it returns rather than a
// backend that never saw it; once it is back, the conversation goes on.
func TestAStoredResponsesBackendOutOfRoutingIsA503(t *testing.T) {
	var urls []string
	for range 2 {
		urls = append(urls, startWorkerOpts(t, gpuworker.Options{Model: model, Profile: "instant", StoreResponses: 10}).srv.URL)
	}
	rec, tp := recorded(t)
	s := startSluice(t, router.Options{TracerProvider: tp}, routeSpec{model: model, policy: roundrobin.Name, urls: urls})
	c := s.client(t)
	ctx := context.Background()
	res, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(4),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")}})
	require.NoError(t, err)
	holder := urls[0]
	if s.endpoints[urls[1]].Requests() > 0 {
		holder = urls[1]
	}
	// The attempt ends after its answer went (and marks its backend
	// reachable then): held out after that.
	require.Eventually(t, func() bool { return s.endpoints[holder].InFlight() == 0 }, 5*time.Second, time.Millisecond)
	s.endpoints[holder].MarkFailed(time.Now(), time.Minute)
	next := responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(4), PreviousResponseID: openai.String(res.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Again.")}}
	_, err = c.Responses.New(ctx, next)
	requireStatus(t, err, http.StatusServiceUnavailable, "no_backend_available")
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Contains(t, apiErr.Message, "stored response")
	assert.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	require.True(t, s.endpoints[holder].MarkHealthy())
	_, err = c.Responses.New(ctx, next)
	require.NoError(t, err)

	// Its trace says why it went there: the pick was pinned.
	var pinned []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "pick" && attrs(sp)["sluice.pick.pinned"].AsBool() {
			pinned = append(pinned, attrs(sp)["sluice.backend"].AsString())
		}
	}
	assert.Equal(t, []string{holder}, pinned, "the continuation's pick alone (the 503 made none)")
}

// TestAStoredResponseDoesNotChangeTheModel: a request naming another
// model than the one that made the response it continues runs on the
// model it names (whose backend answers that it has no such response),
// never on the other model's backend.
func TestAStoredResponseDoesNotChangeTheModel(t *testing.T) {
	a := startWorkerOpts(t, gpuworker.Options{Model: model, Profile: "instant", StoreResponses: 10})
	b := startWorkerOpts(t, gpuworker.Options{Model: "other", Profile: "instant", StoreResponses: 10})
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{a.srv.URL}}, routeSpec{model: "other", urls: []string{b.srv.URL}})
	c := s.client(t)
	ctx := context.Background()
	res, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(4),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")}})
	require.NoError(t, err)
	before := a.Load().PromptTokens
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "other", MaxOutputTokens: openai.Int(4), PreviousResponseID: openai.String(res.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Again.")}})
	requireStatus(t, err, http.StatusNotFound, "not_found") // the other model's worker: it has no such response
	assert.Equal(t, before, a.Load().PromptTokens, "the first model's worker ran nothing more")
}

// TestStoredResponseRoutesAnswerTheirMethods: a method a stored
// response's route does not take is a 405 naming those it does.
func TestStoredResponseRoutesAnswerTheirMethods(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPut, "/v1/responses/resp_1", "GET, HEAD, DELETE"},
		{http.MethodGet, "/v1/responses/resp_1/cancel", "POST"},
		{http.MethodDelete, "/v1/responses/resp_1/input_items", "GET, HEAD"},
		{http.MethodGet, "/v1/responses", "POST"},
	} {
		req, err := http.NewRequest(tt.method, s.srv.URL+tt.path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s", tt.method, tt.path)
		assert.Equal(t, tt.allow, res.Header.Get("Allow"), "%s %s", tt.method, tt.path)
	}
}

// requireStatus asserts err is the API's error with status and code.
func requireStatus(t *testing.T, err error, status int, code string) {
	t.Helper()
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
	assert.Equal(t, status, apiErr.StatusCode, apiErr.RawJSON())
	assert.Equal(t, code, apiErr.Code, apiErr.RawJSON())
	assert.False(t, strings.Contains(apiErr.RawJSON(), "\"error\":null"))
}
