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
