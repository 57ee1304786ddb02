package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchAPIServedAndResumed: with batch.enabled, sluice serve runs a
// batch the official client sends, and a restart on the same data
// directory still has it.
func TestBatchAPIServedAndResumed(t *testing.T) {
	for _, store := range []string{"disk", "redis"} {
		t.Run(store, func(t *testing.T) { testBatchAPI(t, store) })
	}
}

func testBatchAPI(t *testing.T, store string) {
	w := startWorker(t, "m")
	sum := sha256.Sum256([]byte("sk-acme"))
	extra := ""
	if store == "redis" {
		extra = "limits:\n  redis_url: " + startRedis(t).url() + "\n"
	}
	cfg := writeConfig(t, "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n      - url: "+w.URL+"\n"+
		"tiers:\n  - name: pro\n"+
		"tenants:\n  - name: acme\n    tier: pro\n    api_keys: [sha256:"+hex.EncodeToString(sum[:])+"]\n"+extra+
		"batch:\n  enabled: true\n  store: "+store+"\n  data_dir: "+t.TempDir()+"\n  dispatch_interval: 20ms\n")
	serve := func() (string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		var logs syncBuffer
		go func() {
			done <- runServer(ctx, serverOptions{path: cfg, drain: 5 * time.Second, ready: ready,
				log: slog.New(slog.NewTextHandler(&logs, nil))})
		}()
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(logs.String())
			}
		})
		return <-ready, func() {
			cancel()
			require.NoError(t, <-done, logs.String())
		}
	}
	addr, stop := serve()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := func(addr string) openai.Client {
		return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("sk-acme"),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	}
	ctx := context.Background()
	c := client(addr)
	line := `{"custom_id":"ID","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}}`
	in, err := c.Files.New(ctx, openai.FileNewParams{Purpose: openai.FilePurposeBatch, File: openai.File(
		strings.NewReader(strings.ReplaceAll(line, "ID", "a")+"\n"+strings.ReplaceAll(line, "ID", "b")+"\n"), "in.jsonl", "application/jsonl")})
	require.NoError(t, err)
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, err = c.Batches.Get(ctx, b.ID)
		require.NoError(t, err)
		return b.Status == openai.BatchStatusCompleted
	}, 10*time.Second, 10*time.Millisecond)
	assert.EqualValues(t, 2, b.RequestCounts.Completed)
	stop()

	addr, stop = serve()
	defer stop()
	c = client(addr)
	again, err := c.Batches.Get(ctx, b.ID)
	require.NoError(t, err)
	assert.Equal(t, openai.BatchStatusCompleted, again.Status)
	res, err := c.Files.Content(ctx, again.OutputFileID)
	require.NoError(t, err)
	out, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(out), `"status_code":200`))
}
