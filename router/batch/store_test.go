package batch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/batch"
)

// storeContract is what every Store must do; open returns a new, empty
// one.
func storeContract(t *testing.T, open func(t *testing.T) batch.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	ttl := time.Minute

	t.Run("files and batches", func(t *testing.T) {
		s := open(t)
		_, err := s.File(ctx, "file-x")
		require.ErrorIs(t, err, batch.ErrNotFound)
		require.NoError(t, s.SaveFile(ctx, batch.FileMeta{ID: "file-a", Owner: "acme", Purpose: "batch", Bytes: 3}))
		require.NoError(t, s.SaveFile(ctx, batch.FileMeta{ID: "file-b", Owner: "rival"}))
		f, err := s.File(ctx, "file-a")
		require.NoError(t, err)
		assert.EqualValues(t, 3, f.Bytes)
		fs, err := s.Files(ctx, "acme")
		require.NoError(t, err)
		require.Len(t, fs, 1)
		require.NoError(t, s.DeleteFile(ctx, "file-a"))
		require.ErrorIs(t, s.DeleteFile(ctx, "file-a"), batch.ErrNotFound)

		require.NoError(t, s.SaveFile(ctx, batch.FileMeta{ID: "file-c", Owner: "acme", ExpiresAt: t0.Unix()}))
		require.NoError(t, s.SaveFile(ctx, batch.FileMeta{ID: "file-d", Owner: "rival", ExpiresAt: t0.Unix() + 60}))
		for _, at := range []struct {
			now  time.Time
			want []string
		}{{t0.Add(-time.Second), nil}, {t0, []string{"file-c"}}, {t0.Add(time.Hour), []string{"file-c", "file-d"}}} {
			fs, err := s.ExpiredFiles(ctx, at.now)
			require.NoError(t, err)
			var ids []string
			for _, f := range fs {
				ids = append(ids, f.ID)
			}
			slices.Sort(ids)
			assert.Equal(t, at.want, ids, "expired at %s", at.now.Sub(t0))
		}
		require.NoError(t, s.DeleteFile(ctx, "file-c"))
		fs, err = s.ExpiredFiles(ctx, t0.Add(time.Hour))
		require.NoError(t, err)
		require.Len(t, fs, 1, "a deleted file is not listed")
		assert.Equal(t, "file-d", fs[0].ID)
		require.NoError(t, s.DeleteFile(ctx, "file-d"))

		b := batch.BatchMeta{ID: "batch_1", Owner: "acme", Status: batch.StatusValidating, Metadata: map[string]string{"k": "v"}}
		require.NoError(t, s.CreateBatch(ctx, b))
		require.NoError(t, s.CreateBatch(ctx, batch.BatchMeta{ID: "batch_2", Owner: "acme", Status: batch.StatusCompleted}))
		active, err := s.Active(ctx)
		require.NoError(t, err)
		require.Len(t, active, 1)
		assert.Equal(t, "batch_1", active[0].ID)
		active[0].Metadata["k"] = "changed"
		got, err := s.Batch(ctx, "batch_1")
		require.NoError(t, err)
		assert.Equal(t, "v", got.Metadata["k"], "a Store never shares what a caller may change")

		boom := errors.New("boom")
		_, err = s.UpdateBatch(ctx, "batch_1", func(m *batch.BatchMeta) error {
			m.Status = batch.StatusFailed
			return boom
		})
		require.ErrorIs(t, err, boom)
		got, _ = s.Batch(ctx, "batch_1")
		assert.Equal(t, batch.StatusValidating, got.Status, "an aborted update changes nothing")
		got, err = s.UpdateBatch(ctx, "batch_1", func(m *batch.BatchMeta) error {
			m.Status = batch.StatusInProgress
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, batch.StatusInProgress, got.Status)
		_, err = s.UpdateBatch(ctx, "batch_x", func(*batch.BatchMeta) error { return nil })
		require.ErrorIs(t, err, batch.ErrNotFound)
		all, err := s.Batches(ctx, "acme")
		require.NoError(t, err)
		assert.Len(t, all, 2)
	})

	t.Run("claims", func(t *testing.T) {
		s := open(t)
		require.NoError(t, s.CreateBatch(ctx, batch.BatchMeta{ID: "b", Status: batch.StatusInProgress}))
		require.NoError(t, s.StartLines(ctx, "b", 5))
		require.NoError(t, s.StartLines(ctx, "b", 5), "again: nothing changes")

		a, err := s.Claim(ctx, "b", "r1", 3, ttl, t0)
		require.NoError(t, err)
		assert.Equal(t, []int{0, 1, 2}, a)
		b, err := s.Claim(ctx, "b", "r2", 10, ttl, t0)
		require.NoError(t, err)
		assert.Equal(t, []int{3, 4}, b, "no line is claimed twice")
		c, err := s.Counts(ctx, "b", t0)
		require.NoError(t, err)
		assert.Equal(t, batch.Counts{Total: 5, Claimed: 5}, c)

		ok, err := s.Finish(ctx, "b", 0, batch.Result{CustomID: "x0", Status: 200, Body: []byte(`{"a":1}`)})
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = s.Finish(ctx, "b", 0, batch.Result{CustomID: "x0", Status: 500})
		require.NoError(t, err)
		assert.False(t, ok, "a result is recorded once")
		require.NoError(t, s.Release(ctx, "b", "r1", 1))
		require.NoError(t, s.Release(ctx, "b", "r2", 2), "not r2's: left alone")

		again, err := s.Claim(ctx, "b", "r3", 10, ttl, t0)
		require.NoError(t, err)
		assert.Equal(t, []int{1}, again, "a released line is pending at once")

		// r1 stops renewing; r2 renews. After the ttl, r1's line 2 is
		// pending again and r2's are not.
		later := t0.Add(ttl / 2)
		require.NoError(t, s.Renew(ctx, "b", "r2", []int{3, 4}, ttl, later))
		require.NoError(t, s.Renew(ctx, "b", "r1", []int{3}, ttl, later), "not r1's: left alone")
		expired := t0.Add(ttl + time.Second)
		c, err = s.Counts(ctx, "b", expired)
		require.NoError(t, err)
		assert.Equal(t, 2, c.Claimed, "r2's two; r1's and r3's expired")
		taken, err := s.Claim(ctx, "b", "r4", 10, ttl, expired)
		require.NoError(t, err)
		slices.Sort(taken)
		assert.Equal(t, []int{1, 2}, taken)

		for line, status := range map[int]int{1: 200, 2: 400, 3: 200, 4: 200} {
			ok, err := s.Finish(ctx, "b", line, batch.Result{CustomID: "x", Status: status})
			require.NoError(t, err)
			assert.True(t, ok)
		}
		c, err = s.Counts(ctx, "b", expired)
		require.NoError(t, err)
		assert.Equal(t, batch.Counts{Total: 5, Completed: 4, Failed: 1}, c)
		none, err := s.Claim(ctx, "b", "r1", 10, ttl, expired.Add(time.Hour))
		require.NoError(t, err)
		assert.Empty(t, none, "every line is done")

		seen := map[int]batch.Result{}
		require.NoError(t, s.Results(ctx, "b", func(line int, r batch.Result) error {
			assert.NotContains(t, seen, line)
			seen[line] = r
			return nil
		}))
		assert.Len(t, seen, 5)
		assert.JSONEq(t, `{"a":1}`, string(seen[0].Body))
		assert.Equal(t, 400, seen[2].Status)

		require.NoError(t, s.DropLines(ctx, "b"))
		c, err = s.Counts(ctx, "b", expired)
		require.NoError(t, err)
		assert.Zero(t, c.Total)
		ok, err = s.Finish(ctx, "b", 1, batch.Result{Status: 200})
		require.NoError(t, err)
		assert.False(t, ok, "a late result after the batch ended has no place")
	})
}

func TestDiskStore(t *testing.T) {
	storeContract(t, func(t *testing.T) batch.Store {
		s, err := batch.OpenDiskStore(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}

// TestDiskStoreReopens: what one process recorded, the next one finds;
// claims do not survive (their lines are pending again), and a result
// cut short by a crash is dropped.
func TestDiskStoreReopens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	s, err := batch.OpenDiskStore(dir)
	require.NoError(t, err)
	require.NoError(t, s.SaveFile(ctx, batch.FileMeta{ID: "file-a", Owner: "acme"}))
	require.NoError(t, s.CreateBatch(ctx, batch.BatchMeta{ID: "b", Owner: "acme", Status: batch.StatusInProgress, Total: 4}))
	require.NoError(t, s.CreateBatch(ctx, batch.BatchMeta{ID: "done", Status: batch.StatusInProgress}))
	require.NoError(t, s.StartLines(ctx, "b", 4))
	require.NoError(t, s.StartLines(ctx, "done", 1))
	_, err = s.Claim(ctx, "b", "r1", 4, time.Hour, now)
	require.NoError(t, err)
	for _, line := range []int{0, 2} {
		ok, err := s.Finish(ctx, "b", line, batch.Result{CustomID: "c", Status: 200})
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, err = s.UpdateBatch(ctx, "done", func(m *batch.BatchMeta) error {
		m.Status = batch.StatusCompleted
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	log, err := os.OpenFile(filepath.Join(dir, "batches", "b.results"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = log.WriteString(`{"line":3,"result":{"custom_id":"c","sta`) // the crash
	require.NoError(t, err)
	require.NoError(t, log.Close())

	s, err = batch.OpenDiskStore(dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	f, err := s.File(ctx, "file-a")
	require.NoError(t, err)
	assert.Equal(t, "acme", f.Owner)
	c, err := s.Counts(ctx, "b", now)
	require.NoError(t, err)
	assert.Equal(t, batch.Counts{Total: 4, Completed: 2}, c, "two results, no claim, the cut line dropped")
	lines, err := s.Claim(ctx, "b", "r2", 10, time.Hour, now)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, lines, "what had no result is pending")
	ok, err := s.Finish(ctx, "b", 3, batch.Result{CustomID: "c", Status: 200})
	require.NoError(t, err)
	assert.True(t, ok, "the log goes on after the cut")
	_, err = os.Stat(filepath.Join(dir, "batches", "done.results"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a finished batch's log is removed")
}
