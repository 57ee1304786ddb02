package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/all"
)

func TestSimulateCompactAllPolicies(t *testing.T) {
	code, stdout, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "200",
		"--policy", "all", "--oracle", "--table", "compact", "--routers", "2", "--scrape-interval", "50ms")
	require.Equal(t, exitOK, code, stderr)
	reg := policies.NewRegistry()
	require.NoError(t, all.Register(reg))
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2+len(reg.Names())+1, stdout)
	assert.Contains(t, lines[0], "routers 2 | scrape 50ms")
	assert.Contains(t, lines[0], "(first 200, --requests)")
	for _, col := range []string{"TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms", "goodput req/s", "E2E p99 ms", "prefix hit", "util"} {
		assert.Contains(t, lines[1], col)
	}
	for i, name := range reg.Names() {
		assert.Equal(t, name, strings.Fields(lines[2+i])[0])
	}
	assert.Equal(t, oracleName, strings.Fields(lines[len(lines)-1])[0])
	assert.NotContains(t, stdout, "Policy:", "compact mode prints no per-policy reports")
}

func TestPolicyRows(t *testing.T) {
	reg := policies.NewRegistry()
	require.NoError(t, all.Register(reg))
	f := simFlags{policies: "default, round_robin:{}, least_request:{a: 1, b: [2, 3]}", oracle: true}
	rows, err := f.policyRows(reg)
	require.NoError(t, err)
	require.Len(t, rows, 4)
	assert.Equal(t, configs.DefaultPolicy, rows[0].label)
	assert.Equal(t, "round_robin", rows[1].name)
	assert.Equal(t, "least_request:{a: 1, b: [2, 3]}", rows[2].label)
	assert.Equal(t, map[string]any{"a": 1, "b": []any{2, 3}}, rows[2].params)
	assert.True(t, rows[3].oracle)

	assert.Equal(t, []string{"a", "b:{x: 1, y: [1, 2]}", "c"}, splitTop(" a,,b:{x: 1, y: [1, 2]} ,c,"))
}
