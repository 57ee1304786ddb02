package backends

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A prompt counts as fresh from its send until the endpoint's next step
// mark or its own first token, whichever comes first; pending counts it
// until its first token. A stream's read marks a step only when that
// stream has read since the last mark: the first read of another stream
// after a mark is a token of the same step.
func TestFreshPromptTokensUntilTheNextStepMark(t *testing.T) {
	e, err := NewEndpoint("http://127.0.0.1:1", 1)
	require.NoError(t, err)
	s1, s2 := e.StepReader(), e.StepReader()
	assert.False(t, s1.Read(), "a stream's first read marks nothing")

	a := e.Start(100, 150)
	assert.EqualValues(t, 100, e.FreshPromptTokens())
	assert.False(t, s2.Read(), "another stream's first read: the same step as s1's")
	assert.EqualValues(t, 100, e.FreshPromptTokens())
	assert.True(t, s1.Read(), "s1's next token ends a later step: a's prompt is the engine's")
	assert.Zero(t, e.FreshPromptTokens())
	assert.EqualValues(t, 100, e.PendingPromptTokens(), "still pending until its first token")
	assert.False(t, s2.Read(), "s2's token of the step s1 just marked")
	assert.False(t, s2.Read(), "a step with nothing sent before it hands nothing")

	b, c := e.Start(200, 250), e.Start(50, 60)
	assert.EqualValues(t, 250, e.FreshPromptTokens())
	// A slow first token (a low measured prefill rate), so that the whole
	// answer below stays pending for its expected prefill, a minute, not
	// the millisecond a fast rate gave it (the race detector on a busy
	// machine overran that once).
	b.FirstToken(time.Minute)
	assert.EqualValues(t, 50, e.FreshPromptTokens(), "b's first token came before a mark")
	a.Finish(Outcome{Class: ClassOK})
	assert.EqualValues(t, 50, e.FreshPromptTokens(), "a was handed over at an earlier mark")
	assert.False(t, s1.Read(), "s1's first read since s2's mark")
	assert.True(t, s1.Read())
	assert.Zero(t, e.FreshPromptTokens())
	c.Finish(Outcome{Class: ClassOK})
	b.Finish(Outcome{Class: ClassOK})
	assert.Zero(t, e.FreshPromptTokens())
	assert.Zero(t, e.PendingPromptTokens())

	w := e.StartWhole(300, 310)
	assert.EqualValues(t, 300, e.FreshPromptTokens())
	w.Finish(Outcome{Class: ClassOK})
	assert.Zero(t, e.FreshPromptTokens(), "a whole answer's prompt ends with its attempt")
}

// LastStepMark says when a stream last marked one of the endpoint's steps.
func TestLastStepMark(t *testing.T) {
	e, err := NewEndpoint("http://127.0.0.1:1", 1)
	require.NoError(t, err)
	s := e.StepReader()
	s.Read()
	assert.True(t, e.LastStepMark().IsZero(), "a stream's first read marks nothing")
	before := time.Now()
	s.Read()
	assert.False(t, e.LastStepMark().Before(before), "its next read marks a step now")
}
