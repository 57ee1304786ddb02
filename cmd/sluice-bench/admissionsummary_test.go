package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummarizeAdmissionCLI runs small simulations of each figure through
// the CLI, as deploy/bench-admission.sh does, and checks that every
// target's row is printed with the ratio of the numbers the JSON holds.
func TestSummarizeAdmissionCLI(t *testing.T) {
	dir := t.TempDir()
	sim := func(name string, args ...string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		base := []string{"simulate", "--fleet", "1xh100-llama3-8b,1xl4-llama3-8b", "--synthetic", "--requests", "300",
			"--seed", "3", "--policy", "default", "--admission", "--table", "compact", "--json", path}
		code, _, stderr := runCLI(t, append(base, args...)...)
		require.Equal(t, exitOK, code, stderr)
		return path
	}
	ref := sim("ref.json", "--load", "0.8", "--oracle")
	light := sim("light.json", "--load", "0.5", "--mix", "priority=0.3,flex=0.7")
	over := sim("over.json", "--load", "1.3", "--mix", "priority=0.3,flex=0.7")
	beside := sim("beside.json", "--load", "1.3", "--tenants", "heavy=10,light=1")
	alone := sim("alone.json", "--load", "1.3", "--tenants", "heavy=10,light=1", "--only-tenant", "light")

	code, stdout, stderr := runCLI(t, "summarize-admission", "--reference", ref, "--classes-light", light, "--classes-over", over,
		"--tenants", beside, "--tenant-alone", alone)
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 6, stdout) // a header and five figures
	for i, want := range []string{"over the reference's", "priority p99 TTFT at load 1.3", "shed at load 1.3",
		"flex req/s while requests wait over the spare", "tenant light's p99 TTFT"} {
		assert.Contains(t, lines[i+1], want)
		assert.Contains(t, lines[i+1], "seed 3")
	}

	read := func(path string) simResult {
		var out simOutput
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &out))
		r, ok := resultFor(out, "scored")
		require.True(t, ok)
		return r
	}
	pl, po := read(light).Classes["priority"], read(over).Classes["priority"]
	assert.Contains(t, lines[2], fmt.Sprintf("= %.2f", po.TTFT.P99/pl.TTFT.P99), "the ratio of the runs' priority p99s")
	lb, la := read(beside).Tenants["light"], read(alone).Tenants["light"]
	assert.Contains(t, lines[5], fmt.Sprintf("= %.2f", lb.TTFT.P99/la.TTFT.P99))
	assert.Contains(t, lines[3], "priority "+strconv.Itoa(read(over).Shed["priority"]))

	// Figures whose files are missing or unpaired are usage or input errors.
	code, _, _ = runCLI(t, "summarize-admission")
	assert.Equal(t, exitUsage, code)
	code, _, stderr = runCLI(t, "summarize-admission", "--classes-light", light)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "go together")
	code, _, stderr = runCLI(t, "summarize-admission", "--reference", light)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "no oracle row")
	code, _, stderr = runCLI(t, "summarize-admission", "--reference", ref, "--policy", "p2c")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, `no row for policy "p2c"`)
}

func TestAdmissionSpare(t *testing.T) {
	// Flex's rate while requests wait is held against the capacity
	// estimate less priority's rate then.
	dir := t.TempDir()
	write := func(name string, out simOutput) string {
		path := filepath.Join(dir, name)
		b, err := json.Marshal(out)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		return path
	}
	cls := func(p99 float64) map[string]classReport {
		var c classReport
		c.TTFT.P99 = p99
		return map[string]classReport{"priority": c}
	}
	light := write("l.json", simOutput{Fleet: "f", Seed: 2, OfferedLoad: 0.5, Results: []simResult{{Policy: "scored", Classes: cls(200)}}})
	over := write("o.json", simOutput{Fleet: "f", Seed: 2, OfferedLoad: 1.3, CapacityEstimate: 60, Results: []simResult{{
		Policy: "scored", Classes: cls(250), Shed: map[string]int{"priority": 0, "flex": 7},
		Saturation: &saturationStat{Classes: map[string]boundRate{"priority": {RequestsPerS: 20}, "flex": {RequestsPerS: 36}}},
	}}})
	code, stdout, stderr := runCLI(t, "summarize-admission", "--classes-light", light, "--classes-over", over)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "250 / 200 ms = 1.25")
	assert.Contains(t, stdout, "priority 0, flex 7")
	assert.Contains(t, stdout, "36.0 / 40.0 = 0.90")
}

// simulate --admission says which room rules it binds by: by default the
// router's (500ms of pending prefill, a detour of 250ms for a tenant below
// its share), a step budget in its place with --prefill-steps, and the
// detour rule for every request, which the router lacks, only when asked.
func TestSimulateSaysItsRoomRules(t *testing.T) {
	args := []string{"simulate", "--fleet", "1xh100-llama3-8b", "--synthetic", "--requests", "50", "--policy", "default",
		"--admission", "--table", "compact"}
	code, _, stderr := runCLI(t, args...)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "admission (policy rows)")
	assert.Contains(t, stderr, "max wait priority 5s, default 30s, flex 10m0s; queue max 10000")
	assert.Contains(t, stderr, "room needs prompts pending under 500ms of prefill")
	assert.NotContains(t, stderr, "step token budget")
	assert.Contains(t, stderr, "a tenant below its share binds within 250ms of its quickest start")
	assert.NotContains(t, stderr, "a detour of at most")
	code, _, stderr = runCLI(t, append(args, "--prefill-steps", "1", "--max-detour", "1s")...)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "room needs prompts pending under 1 step token budget(s)")
	assert.NotContains(t, stderr, "of prefill at the measured rate", "a step budget takes the default away, as in the router")
	assert.Contains(t, stderr, "a detour of at most 1s (a what-if")
	assert.NotContains(t, stderr, "below its share", "--max-detour takes the tenants' detour's place")
	code, _, stderr = runCLI(t, append(args, "--max-pending-prefill=-1s", "--max-detour-below-share=-1s")...)
	require.Equal(t, exitOK, code, stderr)
	assert.NotContains(t, stderr, "room needs")
	assert.NotContains(t, stderr, "below its share")
}
