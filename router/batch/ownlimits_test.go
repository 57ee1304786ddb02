package batch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
)

// TestBatchLeavesItsTenantsLimitsAlone: a batch line waiting for
// admission holds none of its tenant's concurrency slots or tokens, so the
// tenant's own interactive requests and its batch management calls go on
// while it waits. Lines held them from before admission: with a batch
// running, the tenant's chat requests, and the cancel of its batch, were
// refused 429.
func TestBatchLeavesItsTenantsLimitsAlone(t *testing.T) {
	tests := []struct {
		name   string
		limits quota.Limits
	}{
		// The interactive request below holds acme's one slot while it
		// waits, and the create and cancel must pass beside it.
		{"concurrency", quota.Limits{Concurrency: 1}},
		// A waiting line's 40 output tokens and the request's 40 pass
		// the burst of 60.
		{"output tokens", quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 60}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup{budget: 1, tenants: []*auth.Tenant{
				{Name: "acme", Tier: "pro", Models: []string{model}, DefaultMaxTokens: 16, Limits: tt.limits},
			}}
			s.runner.Concurrency = 1 // one line in flight: it waits for admission
			f := start(t, s)
			ctx := context.Background()
			acme := f.client(t, "sk-acme")

			// Another request holds the backend's one slot: whatever comes
			// next waits in the queue.
			held, err := f.gate.Admit(ctx, admission.Request{Class: admission.Priority, Tenant: "other", Weight: 1,
				Routing: &policies.Request{Model: model}})
			require.NoError(t, err)
			defer held.Release()

			spare := upload(t, acme, chatLines(1, model, 4)) // before the chat request holds acme's slot
			b := create(t, acme, upload(t, acme, chatLines(2, model, 40)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
			require.Eventually(t, func() bool { return f.gate.Waiting() == 1 }, 10*time.Second, time.Millisecond,
				"a line waits for admission")

			answered := make(chan error, 1)
			go func() {
				_, err := acme.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("interactive")}, MaxTokens: openai.Int(40)})
				answered <- err
			}()
			deadline := time.Now().Add(10 * time.Second)
			for f.gate.Waiting() < 2 {
				select {
				case err := <-answered:
					t.Fatalf("acme's request was answered with no room on the fleet (the batch line held its limits): %v", err)
				case <-time.After(time.Millisecond):
				}
				require.True(t, time.Now().Before(deadline), "acme's request never reached the queue")
			}

			// While acme's request waits (holding its slot), the batch
			// management calls pass.
			other := create(t, acme, spare.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
			cancelled, err := acme.Batches.Cancel(ctx, other.ID)
			require.NoError(t, err, "a cancel is never refused for the tenant's limits")
			assert.Contains(t, []openai.BatchStatus{openai.BatchStatusCancelling, openai.BatchStatusCancelled}, cancelled.Status)

			held.Release()
			select {
			case err := <-answered:
				require.NoError(t, err, "acme's request runs once the fleet has room")
			case <-time.After(10 * time.Second):
				t.Fatal("acme's request was never answered")
			}
			done := await(t, acme, b.ID, openai.BatchStatusCompleted)
			assert.EqualValues(t, 2, done.RequestCounts.Completed)
			await(t, acme, other.ID, openai.BatchStatusCancelled)
		})
	}
}

// TestCancelIsNotLimited: a cancel passes when the tenant's request rate is
// used up (by its batch's lines, say): it was one request against it.
func TestCancelIsNotLimited(t *testing.T) {
	f := start(t, setup{tenants: []*auth.Tenant{
		{Name: "acme", Tier: "pro", DefaultMaxTokens: 16, Limits: quota.Limits{RequestsPerMinute: 1, RequestBurst: 2}},
	}})
	f.stopRunner() // no line uses the rate meanwhile
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	b := create(t, acme, upload(t, acme, chatLines(1, model, 4)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	_, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: b.InputFileID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	apiError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded") // the rate is used up
	got, err := acme.Batches.Cancel(ctx, b.ID)
	require.NoError(t, err)
	assert.Equal(t, openai.BatchStatusCancelling, got.Status)
}
