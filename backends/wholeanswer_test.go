package backends

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWholeAnswerEstimatesTheFirstToken(t *testing.T) {
	e, err := NewEndpoint("http://127.0.0.1:1", 1)
	require.NoError(t, err)

	a := e.Start(100, 200)
	a.FirstToken(0)
	a.WholeAnswer(2*time.Second, 101)
	a.Finish(Outcome{Class: ClassOK})
	assert.Zero(t, e.TTFT(), "without a measured decode rate nothing is learnt")

	e.ObserveDecode(100, time.Second) // 100 tokens/s, as a stream measured it
	a = e.Start(100, 200)
	a.FirstToken(0)
	a.WholeAnswer(2*time.Second, 101) // 100 tokens after the first took 1 s
	a.Finish(Outcome{Class: ClassOK})
	assert.InDelta(t, time.Second.Seconds(), e.TTFT().Seconds(), 1e-9)
	assert.InDelta(t, 100.0, e.PrefillTokensPerSec(), 1e-9, "100 prompt tokens, nothing ahead, in 1 s")

	a = e.Start(100, 200)
	a.FirstToken(0)
	a.WholeAnswer(500*time.Millisecond, 101) // faster than its decode: no estimate
	a.Finish(Outcome{Class: ClassOK})
	assert.InDelta(t, time.Second.Seconds(), e.TTFT().Seconds(), 1e-9)
}

func TestWholeAnswersTeachNothingOnceAStreamIsTimed(t *testing.T) {
	e, err := NewEndpoint("http://127.0.0.1:1", 1)
	require.NoError(t, err)
	e.ObserveDecode(100, time.Second) // 100 tokens/s

	a := e.Start(100, 200)
	a.FirstToken(100 * time.Millisecond) // a stream: 1,000 prompt tokens/s, TTFT 0.1 s
	a.Finish(Outcome{Class: ClassOK})
	require.InDelta(t, 1000.0, e.PrefillTokensPerSec(), 1e-9)

	w := e.StartWhole(100, 200)
	w.WholeAnswer(2*time.Second, 101) // would read as a 1 s first token
	w.Finish(Outcome{Class: ClassOK})
	assert.InDelta(t, 1000.0, e.PrefillTokensPerSec(), 1e-9, "the streamed measurement stands")
	assert.InDelta(t, 0.1, e.TTFT().Seconds(), 1e-9)
}
