package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestListProfiles(t *testing.T) {
	var out, errOut bytes.Buffer
	code := serve(t.Context(), []string{"--list-profiles"}, &out, &errOut, nil)
	require.Equal(t, 0, code, errOut.String())
	for _, name := range []string{"h100-llama3-8b", "a100-80gb-llama3-8b", "a100-40gb-llama3-8b",
		"l4-llama3-8b", "a10g-llama3-8b", "2xh100-llama3-70b", "instant"} {
		assert.Contains(t, out.String(), name)
	}
}

// A wrong command line exits 2 and a run that fails exits 1, as
// cmd/sluice does; each message names the flag once, with one "gpuworker:"
// prefix.
func TestBadFlags(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no model", []string{"--listen", "127.0.0.1:0"}, 2, "gpuworker: --model is required"},
		{"zero count", []string{"--model", "m", "--count", "0"}, 2, "gpuworker: --count must be at least 1, got 0"},
		{"bad listen", []string{"--model", "m", "--listen", "nope"}, 2, `gpuworker: --listen "nope": address nope: missing port in address`},
		{"port out of range", []string{"--model", "m", "--listen", "127.0.0.1:65535", "--count", "2"}, 2, "ports 65535 to 65536 (--count 2) are not all in 0..65535"},
		{"unknown profile", []string{"--model", "m", "--listen", "127.0.0.1:0", "--profile", "tpu"}, 2, `gpuworker: --profile "tpu": unknown profile`},
		{"unknown flag", []string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"unexpected argument", []string{"--model", "m", "extra"}, 2, "gpuworker: unexpected arguments: [extra]"},
		{"unknown dialect", []string{"--model", "m", "--listen", "127.0.0.1:0", "--dialect", "triton"}, 2, `gpuworker: --dialect "triton": want vllm, sglang or tgi`},
		{"error rate above one", []string{"--model", "m", "--error-rate", "2"}, 2, "gpuworker: --error-rate must be in [0, 1], got 2"},
		{"bad error status", []string{"--model", "m", "--error-status", "404"}, 2, "gpuworker: --error-status must be in [500, 599], got 404"},
		{"negative stall", []string{"--model", "m", "--stall-after", "-1"}, 2, "gpuworker: --stall-after must not be negative, got -1"},
		{"two faults", []string{"--model", "m", "--stall-after", "-1", "--crash-after", "-2"}, 2, "gpuworker: --stall-after must not be negative, got -1\ngpuworker: --crash-after must not be negative, got -2"},
		{"zero speedup", []string{"--model", "m", "--listen", "127.0.0.1:0", "--speedup", "0"}, 2, "gpuworker: --speedup must be a positive number, got 0"},
		{"negative speedup", []string{"--model", "m", "--listen", "127.0.0.1:0", "--speedup", "-1"}, 2, "gpuworker: --speedup must be a positive number, got -1"},
		{"missing profiles file", []string{"--model", "m", "--profiles", "/nonexistent/profiles.yaml"}, 1, "gpuworker: --profiles: open /nonexistent/profiles.yaml: no such file or directory"},
		{"port in use", []string{"--model", "m", "--listen", busy.Addr().String()}, 1, "address already in use"},
	}
	// A context already done: a row that wrongly starts its workers shuts
	// them down at once (exit 0) rather than serving until the timeout.
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, tt.code, serve(done, tt.args, &out, &errOut, nil), errOut.String())
			assert.Contains(t, errOut.String(), tt.want)
			assert.NotContains(t, errOut.String(), "gpuworker: gpuworker:")
			assert.NotContains(t, errOut.String(), "worker listening", "nothing starts")
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 0, serve(t.Context(), []string{h}, &out, &errOut, nil))
		assert.Contains(t, errOut.String(), "-speedup")
	}
}

func TestServeAndShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrs := make(chan []string, 1)
	code := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		code <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--count", "2", "--model", "m"},
			io.Discard, &errOut, func(a []string) { addrs <- a })
	}()
	got := <-addrs
	require.Len(t, got, 2)
	for _, addr := range got {
		res, err := http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":3}`))
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		assert.Equal(t, http.StatusOK, res.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	assert.Equal(t, 0, <-code)
}

// startServe runs serve with args in the background and returns the worker
// addresses; cleanup stops it and checks it exited cleanly.
func startServe(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan []string, 1)
	code := make(chan int, 1)
	go func() {
		code <- serve(ctx, append([]string{"--listen", "127.0.0.1:0", "--model", "m"}, args...),
			io.Discard, io.Discard, func(a []string) { addrs <- a })
	}()
	var got []string
	select {
	case got = <-addrs:
	case c := <-code:
		t.Fatalf("serve exited with %d", c)
	}
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		assert.Equal(t, 0, <-code)
	})
	return got
}

func TestDialectFlag(t *testing.T) {
	addr := startServe(t, "--dialect", "tgi")[0]
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.Contains(t, string(body), "tgi_queue_size 0")
	assert.NotContains(t, string(body), "vllm:")
}

func TestCrashAfterClosesServer(t *testing.T) {
	addr := startServe(t, "--crash-after", "1")[0]
	post := func() (*http.Response, error) {
		return http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":3}`))
	}
	res, err := post()
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)

	_, err = post()
	require.Error(t, err, "the second request crashes the worker")
	// The listener is gone: new connections are refused.
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			_ = conn.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond)
}

func TestProfilesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles.yaml")
	require.NoError(t, os.WriteFile(path, []byte("profiles:\n  - name: h200-llama3-8b\n    base: h100-llama3-8b\n    gpu: H200 SXM\n    hbm_bytes: 141e9\n    bandwidth_bytes_per_s: 4.8e12\n"), 0o600))
	var out, errOut bytes.Buffer
	require.Equal(t, 0, serve(t.Context(), []string{"--profiles", path, "--list-profiles"}, &out, &errOut, nil), errOut.String())
	assert.Contains(t, out.String(), "h200-llama3-8b")
	assert.Contains(t, out.String(), "h100-llama3-8b")

	addr := startServe(t, "--profiles", path, "--profile", "h200-llama3-8b", "--speedup", "1000")[0]
	res, err := http.Get("http://" + addr + "/v1/models")
	require.NoError(t, err)
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&models))
	require.NoError(t, res.Body.Close())
	require.Len(t, models.Data, 1)
	assert.Positive(t, models.Data[0].MaxModelLen)
}
