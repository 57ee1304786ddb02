package batch_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
)

// slow is a worker that takes a while per line (a simulated H100 in real
// time) behind a gate that runs one request at a time.
func slow() setup {
	return setup{profile: "h100-llama3-8b", speedup: 1, budget: 1}
}

// TestCancel: cancelling one batch ends it cancelled with what finished,
// and leaves another batch to complete.
func TestCancel(t *testing.T) {
	f := start(t, slow())
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	short := create(t, acme, upload(t, acme, chatLines(2, model, 4)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	long := create(t, acme, upload(t, acme, chatLines(40, model, 40)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)

	require.Eventually(t, func() bool {
		b, err := acme.Batches.Get(ctx, long.ID)
		require.NoError(t, err)
		return b.RequestCounts.Completed >= 1
	}, 20*time.Second, 10*time.Millisecond)
	b, err := acme.Batches.Cancel(ctx, long.ID)
	require.NoError(t, err)
	assert.Contains(t, []openai.BatchStatus{openai.BatchStatusCancelling, openai.BatchStatusCancelled}, b.Status)
	assert.Positive(t, b.CancellingAt)

	b = await(t, acme, long.ID, openai.BatchStatusCancelled)
	assert.Positive(t, b.CancelledAt)
	assert.EqualValues(t, 40, b.RequestCounts.Total)
	assert.Less(t, b.RequestCounts.Completed, int64(40))
	assert.Zero(t, b.RequestCounts.Failed)
	out := download(t, acme, b.OutputFileID)
	assert.Len(t, out, int(b.RequestCounts.Completed), "the output holds what finished")
	assert.Empty(t, b.ErrorFileID)

	again, err := acme.Batches.Cancel(ctx, long.ID)
	require.NoError(t, err, "cancelling a cancelled batch changes nothing")
	assert.Equal(t, openai.BatchStatusCancelled, again.Status)

	s := await(t, acme, short.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 2, s.RequestCounts.Completed)
}

// TestExpired: a batch whose window runs out returns what finished, and
// names every line that did not in its error file.
func TestExpired(t *testing.T) {
	s := slow()
	s.svc.CompletionWindow = 2 * time.Second
	f := start(t, s)
	acme := f.client(t, "sk-acme")
	b := create(t, acme, upload(t, acme, chatLines(60, model, 40)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = await(t, acme, b.ID, openai.BatchStatusExpired)
	assert.Positive(t, b.ExpiredAt)
	assert.EqualValues(t, 60, b.RequestCounts.Total)
	require.Positive(t, b.RequestCounts.Completed, "some lines finished in time")
	assert.EqualValues(t, 60, b.RequestCounts.Completed+b.RequestCounts.Failed)
	out := download(t, acme, b.OutputFileID)
	errs := download(t, acme, b.ErrorFileID)
	assert.Len(t, out, int(b.RequestCounts.Completed))
	assert.Len(t, errs, int(b.RequestCounts.Failed))
	for i := range 60 {
		id := fmt.Sprintf("req-%d", i)
		if l, ok := errs[id]; ok {
			require.NotNil(t, l.Error)
			assert.Equal(t, "batch_expired", l.Error.Code)
			assert.Nil(t, l.Response)
			assert.NotContains(t, out, id)
		} else {
			assert.Contains(t, out, id, "every line is answered once, in one file")
		}
	}
}

// TestResume: a runner stopped midway (a replica restarting) leaves the
// batch to the next one, on the same data directory, which finishes it
// with every line answered exactly once.
func TestResume(t *testing.T) {
	s := slow()
	f := start(t, s)
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	b := create(t, acme, upload(t, acme, chatLines(12, model, 30)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	require.Eventually(t, func() bool {
		b, err := acme.Batches.Get(ctx, b.ID)
		require.NoError(t, err)
		return b.RequestCounts.Completed >= 3
	}, 20*time.Second, 5*time.Millisecond)
	f.stopRunner()
	mid, err := acme.Batches.Get(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusInProgress, mid.Status)
	require.Less(t, mid.RequestCounts.Completed, int64(12), "stopped midway")
	require.NoError(t, f.store.Close())

	s.dir = f.dir
	g := start(t, s)
	acme = g.client(t, "sk-acme")
	done := await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 12, done.RequestCounts.Completed)
	assert.Zero(t, done.RequestCounts.Failed)
	assert.Len(t, download(t, acme, done.OutputFileID), 12, "each line once (download fails on a second answer)")
}

// TestNoCapacityIsNoFailure: admission sheds flex lines when the fleet is
// busy; the runner backs off and retries them, and none fails.
func TestNoCapacityIsNoFailure(t *testing.T) {
	s := slow()
	s.queue, s.flexWait = 2, 50*time.Millisecond
	f := start(t, s)
	acme := f.client(t, "sk-acme")
	b := create(t, acme, upload(t, acme, chatLines(10, model, 8)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 10, b.RequestCounts.Completed)
	assert.Zero(t, b.RequestCounts.Failed)
	assert.Empty(t, b.ErrorFileID)
	assert.Positive(t, f.counter(t, "sluice_admission_shed_total"), "admission did shed flex lines")
	assert.Positive(t, f.counter(t, "sluice_batch_lines_total", "outcome", "no_capacity"), "and the runner retried them")
	assert.EqualValues(t, 10, f.counter(t, "sluice_batch_lines_total", "outcome", "completed"))
}

// TestTenantLimits: lines run as their tenant, under its rate limits (a
// 429 is a wait, not a failure) and its tier's service classes.
func TestTenantLimits(t *testing.T) {
	f := start(t, setup{tenants: []*auth.Tenant{
		{Name: "acme", Tier: "pro", DefaultMaxTokens: 16,
			Limits: quota.Limits{RequestsPerMinute: 1200, RequestBurst: 2}}, // the upload and the create count too
		{Name: "strict", Tier: "interactive", DefaultMaxTokens: 16, Classes: []string{"default"}},
	}})
	acme, strict := f.client(t, "sk-acme"), f.client(t, "sk-strict")
	b := create(t, acme, upload(t, acme, chatLines(8, model, 4)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 8, b.RequestCounts.Completed, "20 requests a second, two at a time: all pass, later")
	assert.Zero(t, b.RequestCounts.Failed)

	_, err := strict.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: upload(t, strict, chatLines(1, model, 4)).ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	assert.Contains(t, apiError(t, err, http.StatusBadRequest, "flex_not_allowed"), "flex", "a tier without flex cannot run batches")
}

// TestQueuedTokenCap: a tier's cap on queued batch tokens fails a batch
// that would pass it, counting the tenant's batches still running.
func TestQueuedTokenCap(t *testing.T) {
	s := slow()
	s.svc.QueuedTokens = map[string]int64{"pro": 600}
	f := start(t, s)
	ctx := context.Background()
	acme, rival := f.client(t, "sk-acme"), f.client(t, "sk-rival")

	big := create(t, acme, upload(t, acme, chatLines(20, model, 40)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	big = await(t, acme, big.ID, openai.BatchStatusFailed)
	require.Len(t, big.Errors.Data, 1)
	assert.Equal(t, "token_limit_exceeded", big.Errors.Data[0].Code)
	assert.Contains(t, big.Errors.Data[0].Message, "tier pro")
	assert.Contains(t, big.Errors.Data[0].Message, "Split it", "alone over the cap: no wait helps")

	in := upload(t, acme, chatLines(5, model, 60))
	first := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	await(t, acme, first.ID, openai.BatchStatusInProgress)
	second := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	second = await(t, acme, second.ID, openai.BatchStatusFailed)
	assert.Contains(t, second.Errors.Data[0].Message, "are queued in other batches")

	other := create(t, rival, upload(t, rival, chatLines(5, model, 60)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	other = await(t, rival, other.ID, openai.BatchStatusInProgress, openai.BatchStatusCompleted)
	assert.Empty(t, other.Errors.Data, "the cap is each tenant's")

	await(t, acme, first.ID, openai.BatchStatusCompleted)
	third := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	third = await(t, acme, third.ID, openai.BatchStatusInProgress, openai.BatchStatusCompleted)
	assert.Empty(t, third.Errors.Data)
	_, err := acme.Batches.Cancel(ctx, third.ID)
	require.NoError(t, err)
	await(t, acme, third.ID, openai.BatchStatusCancelled)
}

// TestLinesWaitForOtherWork: while an interactive request is in flight on
// the only backend, batch lines whose prefill would take longer than the
// gate's BatchPrefill wait in admission although the budget has room; they
// run once it ends.
func TestLinesWaitForOtherWork(t *testing.T) {
	f := start(t, setup{profile: "h100-llama3-8b", speedup: 1, budget: 8})
	acme := f.client(t, "sk-acme")
	ctx := context.Background()
	stream := acme.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("interactive")}, MaxTokens: openai.Int(400)},
		option.WithJSONSet("ignore_eos", true))
	require.True(t, stream.Next(), "the first token: the backend's prefill rate is measured, the request in flight")

	long := strings.Repeat("x", 16000) // 4,004 prompt tokens: far past 50ms of prefill at the rate measured
	var lines strings.Builder
	for i := range 2 {
		fmt.Fprintf(&lines, `{"custom_id":"l%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":4}}`+"\n", i, model, long)
	}
	b := create(t, acme, upload(t, acme, lines.String()).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	require.Eventually(t, func() bool { return f.gate.Waiting() == 2 }, 10*time.Second, 5*time.Millisecond,
		"both lines wait with 7 of 8 slots free")
	got, err := acme.Batches.Get(ctx, b.ID)
	require.NoError(t, err)
	assert.Zero(t, got.RequestCounts.Completed)

	for stream.Next() {
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	done := await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 2, done.RequestCounts.Completed)
}

// TestStopLetsRunningLinesFinish: a runner stopped with a drain (a replica
// shutting down) claims no more lines and lets those running finish and
// record their answers instead of throwing their work away; without one
// they are stopped and given back.
func TestStopLetsRunningLinesFinish(t *testing.T) {
	for _, drain := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("drain=%s", drain), func(t *testing.T) {
			s := slow()
			s.runner.Concurrency, s.runner.Drain = 2, drain
			f := start(t, s)
			ctx := context.Background()
			acme := f.client(t, "sk-acme")
			b := create(t, acme, upload(t, acme, chatLines(20, model, 60)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)
			// The gate runs one line at a time: of the two in flight, one
			// runs and one waits for admission. (A line is counted completed
			// before it leaves the flight, so the counters alone can show two
			// in flight with none waiting.)
			require.Eventually(t, func() bool {
				return linesTotal(t, f, "completed") >= 1 && linesInFlight(t, f) == 2 && f.gate.Waiting() == 1
			}, 20*time.Second, time.Millisecond)
			done, refused := linesTotal(t, f, "completed"), linesTotal(t, f, "no_capacity")
			f.stopRunner()
			mid, err := acme.Batches.Get(ctx, b.ID)
			require.NoError(t, err)
			require.Equal(t, openai.BatchStatusInProgress, mid.Status, "stopped midway")
			assert.Zero(t, linesInFlight(t, f))
			if drain == 0 {
				assert.Positive(t, linesTotal(t, f, "stopped"), "the lines running were given back")
				return
			}
			assert.Zero(t, linesTotal(t, f, "stopped"), "the lines running finished")
			assert.EqualValues(t, linesTotal(t, f, "completed"), mid.RequestCounts.Completed, "and were recorded")
			// The line waiting for admission gave up at once, rather than
			// start in the drain (and be cut when a longer one ran out).
			assert.LessOrEqual(t, linesTotal(t, f, "completed")-done, 1.0, "only the line running finished")
			assert.Equal(t, refused+1, linesTotal(t, f, "no_capacity"), "the line waiting was given back")
			assert.Less(t, mid.RequestCounts.Completed, int64(20), "no line started after the stop")
		})
	}
}

// linesTotal is the runner's sluice_batch_lines_total for outcome.
func linesTotal(t *testing.T, f *fixture, outcome string) float64 {
	t.Helper()
	return gathered(t, f, "sluice_batch_lines_total", outcome)
}

// linesInFlight is the runner's sluice_batch_lines_in_flight.
func linesInFlight(t *testing.T, f *fixture) float64 {
	t.Helper()
	return gathered(t, f, "sluice_batch_lines_in_flight", "")
}

func gathered(t *testing.T, f *fixture, name, outcome string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if outcome != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != outcome) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
