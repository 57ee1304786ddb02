package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProbe(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer up.Close()
	var stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"probe", up.URL + "/readyz"}, &bytes.Buffer{}, &stderr))
	assert.Equal(t, 1, run([]string{"probe", up.URL + "/other"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "503")
	up.Close()
	assert.Equal(t, 1, run([]string{"probe", up.URL + "/readyz"}, &bytes.Buffer{}, &stderr), "nothing listening")
	assert.Equal(t, 2, run([]string{"probe"}, &bytes.Buffer{}, &stderr))
}

// TestProbeOverTLS: an https:// listener whose certificate the probe
// cannot verify (a health check on 127.0.0.1 of a certificate for the
// public name) fails, and passes with --insecure.
func TestProbeOverTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	var stderr bytes.Buffer
	assert.Equal(t, 1, run([]string{"probe", up.URL + "/healthz"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "certificate")
	assert.Equal(t, 0, run([]string{"probe", "--insecure", up.URL + "/healthz"}, &bytes.Buffer{}, &stderr))
}

// probe parses its arguments as the other subcommands do: -h and --help
// print its usage and exit 0 instead of being fetched as a URL, and a
// wrong number of arguments or an unknown flag is a usage error.
func TestProbeArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"-h", []string{"-h"}, 0, "usage: sluice probe [--insecure] URL"},
		{"--help", []string{"--help"}, 0, "usage: sluice probe [--insecure] URL"},
		{"-help", []string{"-help"}, 0, "usage: sluice probe [--insecure] URL"},
		{"no URL", nil, 2, "usage: sluice probe [--insecure] URL"},
		{"two URLs", []string{"http://a", "http://b"}, 2, "usage: sluice probe [--insecure] URL"},
		{"unknown flag", []string{"--timeout", "1s", "http://a"}, 2, "flag provided but not defined: -timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, tt.code, run(append([]string{"probe"}, tt.args...), &stdout, &stderr))
			assert.Contains(t, stderr.String(), tt.want)
			assert.NotContains(t, stderr.String(), "unsupported protocol scheme", "a flag is not fetched")
		})
	}
}
