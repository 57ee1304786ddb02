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
