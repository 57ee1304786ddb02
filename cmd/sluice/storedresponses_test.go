package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// TestStoredResponsesAcrossReplicasThroughRedis: two `sluice serve`
// processes sharing a real Redis, round robin over three gpuworkers that
// keep their responses. A conversation whose turns alternate between the
// replicas (as a load balancer in front of them sends them) continues on
// the worker holding each response, and either replica reads it: the
// index of where responses live is Redis's, not a replica's. With Redis
// stopped, a replica finds the responses made through it in its own memory.
func TestStoredResponsesAcrossReplicasThroughRedis(t *testing.T) {
	rd := startRedis(t)
	var backends strings.Builder
	for range 3 {
		w := serveWorkerOpts(t, gpuworker.Options{Model: "m", StoreResponses: 100}, httptest.NewServer)
		backends.WriteString("      - url: " + w.URL + "\n")
	}
	cfg := writeConfig(t, `listen: 127.0.0.1:0
scrape:
  enabled: false
models:
  - name: m
    policy: round_robin
    backends:
`+backends.String()+`tiers:
  - name: t
tenants:
  - name: acme
    tier: t
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
limits:
  redis_url: `+rd.url()+`
`)
	bin := buildSluice(t)
	addrs := []string{startReplica(t, bin, cfg), startReplica(t, bin, cfg)}
	clients := make([]openai.Client, len(addrs))
	for i, a := range addrs {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		clients[i] = openai.NewClient(option.WithBaseURL("http://"+a+"/v1/"), option.WithAPIKey("sk-acme"),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	}
	ctx := context.Background()
	prev := ""
	var ids []string
	for i := range 6 {
		p := responses.ResponseNewParams{Model: "m", MaxOutputTokens: openai.Int(8),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Go on.")}}
		if prev != "" {
			p.PreviousResponseID = openai.String(prev)
		}
		res, err := clients[i%2].Responses.New(ctx, p)
		require.NoError(t, err, "turn %d through replica %d continues %q", i, i%2, prev)
		assert.Equal(t, prev, res.PreviousResponseID)
		prev = res.ID
		ids = append(ids, res.ID)
	}
	for i, id := range ids {
		got, err := clients[(i+1)%2].Responses.Get(ctx, id, responses.ResponseGetParams{})
		require.NoError(t, err, "%s read through the replica that did not make it", id)
		assert.Equal(t, id, got.ID)
	}
	var pinned float64
	for _, a := range addrs {
		pinned += sampleValue(t, scrapeText(t, a), `sluice_stored_responses_total{event="pinned"}`)
	}
	assert.Equal(t, float64(5+6), pinned, "five turns continued, six reads")

	// Redis stops: a conversation through one replica still goes on, from
	// what that replica keeps in its own memory (limits fail open).
	rd.stop()
	prev = ""
	for i := range 3 {
		p := responses.ResponseNewParams{Model: "m", MaxOutputTokens: openai.Int(8),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Go on.")}}
		if prev != "" {
			p.PreviousResponseID = openai.String(prev)
		}
		res, err := clients[0].Responses.New(ctx, p)
		require.NoError(t, err, "turn %d with Redis down continues %q", i, prev)
		prev = res.ID
	}
	assert.Positive(t, sampleValue(t, scrapeText(t, addrs[0]), `sluice_stored_responses_total{event="index_error"}`))
}
