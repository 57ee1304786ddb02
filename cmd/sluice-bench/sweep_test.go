package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/configs"
)

// svgPaths parses the SVG file as XML and counts its <path> elements: one
// per series and panel (package chart's contract).
func svgPaths(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(b))
	paths, root := 0, ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG parses as XML")
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "path" {
				paths++
			}
		}
	}
	require.Equal(t, "svg", root)
	return paths
}

// sweepResults returns the results of each point of a sweep's JSON.
func sweepResults(t *testing.T, got map[string]any) [][]map[string]any {
	t.Helper()
	var out [][]map[string]any
	for _, p := range got["points"].([]any) {
		var rows []map[string]any
		for _, r := range p.(map[string]any)["results"].([]any) {
			rows = append(rows, r.(map[string]any))
		}
		out = append(out, rows)
	}
	return out
}

func TestSweepSimulate(t *testing.T) {
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.svg")
	code, stdout, stderr := runCLI(t, "sweep", "--fleet", "2xh100-llama3-8b,1xl4-llama3-8b", "--synthetic",
		"--requests", "200", "--policy", "round_robin,default", "--loads", "0.4,1.2", "--seed", "3",
		"--goodput-ttft", "300ms", "--json", jsonPath, "--svg", svgPath)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "sluice-bench sweep: load 1.2 (2/2)")
	assert.Contains(t, stdout, "knee: the highest offered load")
	assert.Contains(t, stdout, configs.DefaultPolicy+" (default)")

	got := readJSON(t, jsonPath)
	assert.Equal(t, modeSim, got["mode"])
	assert.EqualValues(t, 3, got["seed"])
	assert.EqualValues(t, 300, got["goodput_ttft_ms"])
	assert.Positive(t, got["capacity_estimate"])
	assert.Equal(t, "2xh100-llama3-8b,1xl4-llama3-8b", got["fleet"])
	points := got["points"].([]any)
	require.Len(t, points, 2)
	assert.EqualValues(t, 0.4, points[0].(map[string]any)["load"])
	assert.EqualValues(t, 1.2, points[1].(map[string]any)["load"])
	rate0, rate1 := points[0].(map[string]any)["offered_rate"].(float64), points[1].(map[string]any)["offered_rate"].(float64)
	assert.InDelta(t, 3, rate1/rate0, 0.3, "the offered rate follows the load")
	for _, rows := range sweepResults(t, got) {
		require.Len(t, rows, 2)
		assert.Equal(t, "round_robin", rows[0]["policy"])
		assert.Equal(t, configs.DefaultPolicy, rows[1]["policy"])
		for _, r := range rows {
			for _, key := range []string{"completed", "failed", "request_throughput", "output_throughput",
				"goodput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms"} {
				assert.Contains(t, r, key)
			}
			assert.EqualValues(t, 200, r["completed"])
			assert.Positive(t, r["output_throughput"])
			assert.NotContains(t, r, "classes", "no classes without --mix or --admission")
		}
	}
	knees := got["knees"].([]any)
	require.Len(t, knees, 2)
	for _, k := range knees {
		k := k.(map[string]any)
		assert.Contains(t, k, "knee")
		assert.Contains(t, k, "within_slo")
		assert.EqualValues(t, 300, k["within_slo"].(map[string]any)["limit_ms"])
	}
	assert.Equal(t, 2*2, svgPaths(t, svgPath), "two panels, one path per policy in each")
}

func TestSweepSimulateClasses(t *testing.T) {
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.svg")
	code, stdout, stderr := runCLI(t, "sweep", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "300",
		"--policy", "default", "--admission", "--mix", "priority=0.3,flex=0.7", "--loads", "0.5,1.3",
		"--json", jsonPath, "--svg", svgPath, "--chart-x", "tokens")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "class priority")
	assert.Contains(t, stdout, "class flex")

	got := readJSON(t, jsonPath)
	assert.Equal(t, xTokens, got["chart_x"])
	for _, rows := range sweepResults(t, got) {
		require.Len(t, rows, 1)
		classes, ok := rows[0]["classes"].(map[string]any)
		require.True(t, ok, "classes per load: %v", rows[0])
		require.Contains(t, classes, "priority")
		require.Contains(t, classes, "flex")
		assert.Contains(t, classes["flex"], "ttft_p99_ms")
		assert.Contains(t, rows[0], "shed")
	}
	var classes []string
	for _, k := range got["knees"].([]any) {
		c, _ := k.(map[string]any)["class"].(string)
		classes = append(classes, c)
	}
	assert.Equal(t, []string{"", "priority", "flex"}, classes, "a knee for the policy, then per class, best first")
	assert.Equal(t, 2*3, svgPaths(t, svgPath), "the policy and its two classes, in each panel")
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.Contains(t, string(svg), `stroke-dasharray="7,4"`, "flex is dashed")
	assert.Contains(t, string(svg), "output tokens/s")
}

func TestSweepLive(t *testing.T) {
	target := startWorker(t)
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.svg")
	code, stdout, stderr := runCLI(t, "sweep", "--target", target, "--model", "m", "--rates", "40,80",
		"--duration", "250ms", "--stream", "--prompt-mean", "32", "--output-mean", "4", "--quiet",
		"--mix", "priority=0.5,flex=0.5", "--json", jsonPath, "--svg", svgPath)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "sluice-bench sweep: rate 80 req/s (2/2)")
	assert.Contains(t, stdout, liveLabel)

	got := readJSON(t, jsonPath)
	assert.Equal(t, modeLive, got["mode"])
	assert.Equal(t, target, got["target"])
	points := got["points"].([]any)
	require.Len(t, points, 2)
	assert.EqualValues(t, 40, points[0].(map[string]any)["offered_rate"])
	assert.NotContains(t, points[0], "load")
	for _, rows := range sweepResults(t, got) {
		require.Len(t, rows, 1)
		assert.Equal(t, liveLabel, rows[0]["policy"])
		assert.Positive(t, rows[0]["completed"])
		assert.EqualValues(t, 0, rows[0]["failed"])
		classes, ok := rows[0]["classes"].(map[string]any)
		require.True(t, ok, "load's split by class reaches the sweep: %v", rows[0])
		assert.Contains(t, classes, "priority")
		assert.Contains(t, classes, "flex")
	}
	assert.Equal(t, 2*3, svgPaths(t, svgPath), "the run and its two classes, in each panel")
}

func TestSweepUsageErrors(t *testing.T) {
	sim := []string{"sweep", "--fleet", "1xh100-llama3-8b", "--synthetic", "--requests", "50"}
	live := []string{"sweep", "--target", "http://127.0.0.1:1", "--model", "m"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"loads must increase", append(sim, "--loads", "0.8,0.5"), "--loads: 0.5 after 0.8"},
		{"loads must be numbers", append(sim, "--loads", "0.5,x"), "want positive numbers"},
		{"chart axis", append(sim, "--chart-x", "bytes"), "--chart-x"},
		{"the sweep sets --load", append(sim, "--load", "0.5"), "flag provided but not defined: -load"},
		{"no saturation", append(sim, "--saturation"), "flag provided but not defined: -saturation"},
		{"simulate's own checks run", []string{"sweep", "--synthetic", "--loads", "0.5"}, "--fleet is required"},
		{"live needs rates or loads", live, "give exactly one of --rates and --loads"},
		{"live takes one of them", append(live, "--rates", "1", "--loads", "1"), "give exactly one of --rates and --loads"},
		{"live sets --rate", append(live, "--rate", "2"), "flag provided but not defined: -rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
}

func TestSweepHelp(t *testing.T) {
	code, _, stderr := runCLI(t, "sweep", "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "Usage: sluice-bench sweep --fleet SPEC")
	assert.Contains(t, stderr, "-policy")
	assert.Contains(t, stderr, "-loads")

	code, _, stderr = runCLI(t, "sweep", "--target=x", "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "Usage: sluice-bench sweep --target URL")
	assert.Contains(t, stderr, "-rates")
	assert.Contains(t, stderr, "-stream")
}

func TestIsLiveSweep(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--target", "http://x"}, true},
		{[]string{"-target=http://x"}, true},
		{[]string{"--fleet", "1xh100-llama3-8b", "--synthetic"}, false},
		{[]string{"--targets", "x"}, false},
		{[]string{"--", "--target"}, false},
		{[]string{"target"}, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, isLiveSweep(tt.args), "%v", tt.args)
	}
}

func TestSweepInnerArgs(t *testing.T) {
	var sw sweepFlags
	var sim simFlags
	fs := sw.flagSet(newSimFlagSet(&sim, io.Discard), io.Discard)
	require.NoError(t, fs.Parse([]string{"--fleet", "1xh100-llama3-8b", "--synthetic", "--oracle=false",
		"--goodput-ttft", "1m30s", "--policy", "scored:{queue: 2},p2c", "--loads", "0.5", "--svg", "x.svg"}))
	assert.Equal(t, []string{"-fleet=1xh100-llama3-8b", "-goodput-ttft=1m30s", "-oracle=false",
		"-policy=scored:{queue: 2},p2c", "-synthetic=true"}, sw.innerArgs(fs),
		"the inner command gets its flags as given, and not the sweep's")

	// They parse back to the same values.
	var again simFlags
	inner := newSimFlagSet(&again, io.Discard)
	require.NoError(t, inner.Parse(sw.innerArgs(fs)))
	assert.Equal(t, sim.goodTTFT, again.goodTTFT)
	assert.Equal(t, sim.policies, again.policies)
	assert.True(t, again.synthetic)
	assert.NotNil(t, inner.Lookup("load"), "simulate keeps --load; only the sweep hides it")
	assert.Nil(t, fs.Lookup("load"))
}

func TestFindKnees(t *testing.T) {
	stats := func(p99s ...float64) []sweepStats {
		var out []sweepStats
		for _, v := range p99s {
			s := sweepStats{Completed: 10, TTFTP99: v, RequestThroughput: v / 100}
			if math.IsNaN(v) {
				s = sweepStats{}
			}
			out = append(out, s)
		}
		return out
	}
	loads := []float64{0.3, 0.5, 0.8, 1.0}
	series := map[string][]sweepStats{
		"round_robin": stats(190_000, 300_000, 380_000, 400_000), // saturated from the start
		"scored":      stats(5000, 8000, 16_000, 50_000),
		"oracle":      stats(4900, 6500, 9000, 20_000),
	}
	flex := stats(5000, 9000, 9800, 30_000)
	prio := stats(1400, 1500, 1800, 2100)
	o := sweepOutput{GoodputTTFTms: 6000}
	for i, l := range loads {
		pt := sweepPoint{Load: l}
		for _, name := range []string{"round_robin", "scored", "oracle"} {
			r := sweepResult{Policy: name, sweepStats: series[name][i]}
			if name == "scored" {
				r.Classes = map[string]sweepStats{"flex": flex[i], "priority": prio[i]}
			}
			pt.Results = append(pt.Results, r)
		}
		o.Points = append(o.Points, pt)
	}
	type want struct {
		policy, class string
		knee          int
		limit         float64
		slo           int
		crossed       bool
	}
	var got []want
	for _, k := range findKnees(o) {
		got = append(got, want{k.Policy, k.Class, k.Knee.Point, k.Knee.LimitMs, k.WithinSLO.Point, k.Knee.Crossed})
	}
	assert.Equal(t, []want{
		{"round_robin", "", -1, 9800, -1, true},   // against the fleet's 4.9 s, not its own 190 s
		{"scored", "", 1, 9800, 0, true},          // 8 s within 9.8 s, 16 s not
		{"scored", "priority", 3, 2800, 3, false}, // its own class's base: 2x 1.4 s, never crossed
		{"scored", "flex", 2, 10_000, 0, true},
		{"oracle", "", 2, 9800, 0, true},
	}, got)

	o.Points[0].Results[2].Completed = 0 // nothing completed for the oracle at the lowest load
	for _, k := range findKnees(o) {
		if k.Policy == oracleName {
			assert.Equal(t, -1, k.Knee.Point)
		}
	}
}
