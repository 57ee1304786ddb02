package admission_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
)

func TestGateStatsCountWaitsAdmissionsAndSheds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t, 1, 1, 10)
		ctx := context.Background()
		hold, err := g.Admit(ctx, req(admission.Default, "x"))
		require.NoError(t, err)
		flex := make(chan ticketOrErr, 1)
		go func() {
			tk, err := g.Admit(ctx, req(admission.Flex, "x"))
			flex <- ticketOrErr{tk, err}
		}()
		synctest.Wait()
		s := g.Stats()
		assert.Equal(t, 1, s[admission.Flex].Waiting)
		assert.Equal(t, uint64(1), s[admission.Default].Admitted)

		_, err = g.Admit(ctx, req(admission.Priority, "x")) // waits its whole second, then is shed
		require.Error(t, err)
		hold.Release()
		got := <-flex
		require.NoError(t, got.err)
		got.t.Release()

		s = g.Stats()
		assert.Equal(t, admission.ClassStats{Shed: 1}, s[admission.Priority])
		assert.Equal(t, admission.ClassStats{Admitted: 1, Waited: time.Second}, s[admission.Flex])
		assert.Equal(t, admission.ClassStats{Admitted: 1}, s[admission.Default])
	})
}

// TestGateCountsCarryOnToTheGateThatReplacesIt: a reload's new gate counts
// on from the old one's counts, and the old one's last admissions count
// there too (the status page went back to zero at each reload).
func TestGateCountsCarryOnToTheGateThatReplacesIt(t *testing.T) {
	old, _ := newGate(t, 1, 1, 10)
	ctx := context.Background()
	tk, err := old.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	tk.Release()
	next, _ := newGate(t, 1, 1, 10)
	next.CountWith(old)
	assert.Equal(t, uint64(1), next.Stats()[admission.Default].Admitted, "carried on")
	for _, g := range []*admission.Gate{next, old} {
		tk, err := g.Admit(ctx, req(admission.Default, "x"))
		require.NoError(t, err)
		tk.Release()
	}
	assert.Equal(t, uint64(3), next.Stats()[admission.Default].Admitted, "the old gate's admissions count there too")
}

// TestReplacedGatesWaitersStillCount: the requests still waiting in the
// gate a reload replaced count as waiting in the new one's stats until they
// leave (they vanished from the status page and the queued metric).
func TestReplacedGatesWaitersStillCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old, _ := newGate(t, 1, 1, 10)
		ctx := context.Background()
		hold, err := old.Admit(ctx, req(admission.Default, "x"))
		require.NoError(t, err)
		waited := make(chan ticketOrErr, 1)
		go func() {
			tk, err := old.Admit(ctx, req(admission.Flex, "x"))
			waited <- ticketOrErr{tk, err}
		}()
		synctest.Wait()
		next, _ := newGate(t, 1, 1, 10)
		next.CountWith(old)
		assert.Equal(t, 1, next.Stats()[admission.Flex].Waiting, "the old gate's waiter")
		hold.Release()
		got := <-waited
		require.NoError(t, got.err)
		got.t.Release()
		assert.Zero(t, next.Stats()[admission.Flex].Waiting)
		assert.Equal(t, uint64(2), next.Stats()[admission.Flex].Admitted+next.Stats()[admission.Default].Admitted)
	})
}
