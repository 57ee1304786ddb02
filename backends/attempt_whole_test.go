package backends_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
)

// A whole answer's prompt is pending for its expected prefill time (the
// queue ahead and its own at the measured rate), not for the whole answer;
// an answer that ends sooner ends it then, once.
func TestWholeAnswerPendsForItsPrefillOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
		require.NoError(t, err)
		e.ObservePrefill(0, 1000, time.Second) // 1,000 prompt tokens/s
		a := e.StartWhole(500, 600)
		assert.EqualValues(t, 500, e.PendingPromptTokens())
		time.Sleep(400 * time.Millisecond)
		assert.EqualValues(t, 500, e.PendingPromptTokens(), "0.4 s into a 0.5 s prefill")
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.Zero(t, e.PendingPromptTokens(), "past its prefill, though the answer has not come")
		a.Finish(backends.Outcome{Class: backends.ClassOK})
		assert.Zero(t, e.PendingPromptTokens(), "ended once")
		assert.Zero(t, e.InFlight())

		b := e.StartWhole(300, 400)
		assert.EqualValues(t, 300, e.PendingPromptTokens())
		b.Finish(backends.Outcome{Class: backends.ClassFailed}) // before its 0.3 s
		assert.Zero(t, e.PendingPromptTokens())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Zero(t, e.PendingPromptTokens(), "the timer stopped: nothing ended twice")
	})
}

// Before the endpoint has measured a prefill rate (its first answers do), a
// whole answer's prompt is not pending: a guessed time per prompt held
// whole answers, under the admission gate's prefill bound, to one request
// at a time per backend until then.
func TestWholeAnswerBeforeAMeasurementIsNotPending(t *testing.T) {
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	a := e.StartWhole(500, 600)
	assert.Zero(t, e.PendingPromptTokens())
	assert.Zero(t, e.FreshPromptTokens())
	assert.EqualValues(t, 1, e.InFlight(), "in flight all the same")
	a.Finish(backends.Outcome{Class: backends.ClassOK})
	assert.Zero(t, e.PendingPromptTokens())
	assert.Zero(t, e.InFlight())
}
