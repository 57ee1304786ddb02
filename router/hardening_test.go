package router_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router"
)

func TestModelNamesWithSlashes(t *testing.T) {
	const name = "meta-llama/Meta-Llama-3-8B-Instruct"
	w := startWorker(t, name, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: name, urls: []string{w.srv.URL}})
	c := s.client(t)
	m, err := c.Models.Get(context.Background(), name) // the SDK sends meta-llama%2FMeta-Llama-3-8B-Instruct
	require.NoError(t, err)
	assert.Equal(t, name, m.ID)
	res, err := http.Get(s.srv.URL + "/v1/models/" + name) // unescaped works too
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	_, err = c.Models.Get(context.Background(), "meta-llama/other")
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
}

func TestClientMistakesReadPlainly(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})

	res, err := http.Get(s.srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	assert.Equal(t, "POST", res.Header.Get("Allow"))

	res, err = http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","max_tokens":"ten"}`))
	require.NoError(t, err)
	e := decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, "Invalid type for 'max_tokens': expected an integer, but got string.", e.Message)

	long := strings.Repeat("x", 1<<20)
	res, err = http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+long+`"}`))
	require.NoError(t, err)
	e = decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Less(t, len(e.Message), 400, "a 1 MiB model name is not echoed whole")
	http.DefaultClient.CloseIdleConnections()
}
