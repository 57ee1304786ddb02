package policies_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/all"
)

func TestRegistryBuildsEveryBuiltIn(t *testing.T) {
	reg := policies.NewRegistry()
	require.NoError(t, all.Register(reg))
	assert.Equal(t, []string{"least_request", "p2c", "prefix_affinity", "queue_depth", "random", "round_robin", "scored", "session_affinity", "tokens_per_sec", "weighted"}, reg.Names())
	e, err := backends.NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	for _, name := range reg.Names() {
		p, err := reg.New(name, nil)
		require.NoError(t, err, name)
		got, err := p.Pick(context.Background(), &policies.Request{}, []*backends.Endpoint{e})
		require.NoError(t, err, name)
		assert.Same(t, e, got, name)
		_, err = p.Pick(context.Background(), &policies.Request{}, nil)
		assert.ErrorIs(t, err, policies.ErrNoEndpoint, name)
	}
}

func TestRegistryRejects(t *testing.T) {
	reg := policies.NewRegistry()
	require.NoError(t, all.Register(reg))
	assert.Error(t, all.Register(reg), "registering twice")

	_, err := reg.New("fastest", nil)
	var unknown *policies.UnknownPolicyError
	require.True(t, errors.As(err, &unknown))
	assert.Equal(t, "fastest", unknown.Name)

	_, err = reg.New("round_robin", map[string]any{"spread": 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field spread not found")
}

func TestDecodeParamsNamesBadField(t *testing.T) {
	var dst struct {
		Choices int `yaml:"choices"`
	}
	require.NoError(t, policies.DecodeParams(map[string]any{"choices": 3}, &dst))
	assert.Equal(t, 3, dst.Choices)
	err := policies.DecodeParams(map[string]any{"choices": "many"}, &dst)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "many")
}
