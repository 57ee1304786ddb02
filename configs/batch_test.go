package configs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchDefaultsAndValidation(t *testing.T) {
	c, err := Parse([]byte(minimal))
	require.NoError(t, err)
	b := c.Batch
	assert.False(t, b.Enabled)
	assert.Equal(t, "./sluice-data", b.DataDir)
	assert.Equal(t, "disk", b.Store)
	assert.Equal(t, 64, b.Concurrency)
	assert.Equal(t, 200*time.Millisecond, b.DispatchInterval.Std())
	assert.EqualValues(t, 200<<20, b.MaxFileBytes)
	assert.Equal(t, 50_000, b.MaxLines)
	assert.Equal(t, 720*time.Hour, b.FileExpiry.Std())
	assert.Equal(t, 24*time.Hour, b.CompletionWindow.Std())
	assert.Equal(t, time.Minute, b.LeaseTTL.Std())
	assert.Equal(t, 3, b.MaxAttempts)

	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "batch: {enabeld: true}", "field enabeld not found"},
		{"store", "batch: {store: etcd}", `batch.store: want disk or redis, got "etcd"`},
		{"concurrency", "batch: {concurrency: -1}", "batch.concurrency: must be between 1 and 10000"},
		{"interval", "batch: {dispatch_interval: 1ms}", "batch.dispatch_interval: must be at least 10ms"},
		{"window", "batch: {completion_window: 10ms}", "batch.completion_window: must be at least 1s"},
		{"expiry", "batch: {file_expiry: 10ms}", "batch.file_expiry: must be at least 1s, or -1s to keep files until deleted, got 10ms"},
		{"expiry negative", "batch: {file_expiry: -1h}", "batch.file_expiry: must be at least 1s, or -1s"},
		{"attempts", "batch: {max_attempts: 1000}", "batch.max_attempts: must be between 1 and 100"},
		{"unknown tier", "batch: {queued_tokens: {gold: 10}}", `batch.queued_tokens.gold: "gold" is not one of tiers`},
		{"cap", "tiers: [{name: free}]\nbatch: {queued_tokens: {free: 0}}", "batch.queued_tokens.free: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(minimal + tt.yaml + "\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	c, err = Parse([]byte(minimal + "tiers: [{name: free}]\nbatch: {enabled: true, data_dir: /var/lib/sluice, queued_tokens: {free: 1000}}\n"))
	require.NoError(t, err)
	assert.True(t, c.Batch.Enabled)
	assert.EqualValues(t, 1000, c.Batch.QueuedTokens["free"])
	c, err = Parse([]byte(minimal + "batch: {file_expiry: -1s}\n"))
	require.NoError(t, err)
	assert.Equal(t, -time.Second, c.Batch.FileExpiry.Std(), "kept until deleted")
}
