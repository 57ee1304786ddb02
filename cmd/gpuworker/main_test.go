package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

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

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no model", []string{"--listen", "127.0.0.1:0"}},
		{"zero count", []string{"--model", "m", "--count", "0"}},
		{"bad listen", []string{"--model", "m", "--listen", "nope"}},
		{"unknown profile", []string{"--model", "m", "--listen", "127.0.0.1:0", "--profile", "tpu"}},
		{"unknown flag", []string{"--bogus"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.NotZero(t, serve(t.Context(), tt.args, &out, &errOut, nil))
			assert.NotEmpty(t, errOut.String())
		})
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
