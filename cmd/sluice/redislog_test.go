package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisClientLogsJoinTheJSONLog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redisLog{l}.Printf(context.Background(), "connection pool: failed to dial after %d attempts", 5)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	assert.Equal(t, "DEBUG", line["level"])
	assert.Equal(t, "connection pool: failed to dial after 5 attempts", line["msg_text"])
}
