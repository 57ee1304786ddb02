package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// TestSimulateSyntheticKinds runs every synthetic kind through the
// simulator and checks that what the workload shares reaches the engines'
// prefix caches.
func TestSimulateSyntheticKinds(t *testing.T) {
	tests := []struct {
		kind string
		args []string
	}{
		{kindPoisson, nil},
		{kindSharedPrefix, []string{"--system-prompts", "2", "--system-prompt-tokens", "1024"}},
		{kindMultiTurn, []string{"--think-time", "1s", "--turns-mean", "4"}},
		{kindLongDoc, []string{"--doc-pool", "20", "--doc-tokens-max", "16384"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sim.json")
			args := append([]string{"simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--workload", tt.kind,
				"--requests", "150", "--load", "0.5", "--json", out}, tt.args...)
			code, _, stderr := runCLI(t, args...)
			require.Equal(t, exitOK, code, stderr)
			assert.Contains(t, stderr, "x capacity)")
			assert.Contains(t, stderr, "ideal prefix reuse")
			row := readJSON(t, out)["results"].([]any)[0].(map[string]any)
			assert.EqualValues(t, 150, row["completed"])
			if tt.kind == kindPoisson {
				assert.Contains(t, stderr, "ideal prefix reuse 0.000")
				return
			}
			assert.NotContains(t, stderr, "ideal prefix reuse 0.000")
			assert.Positive(t, row["prefix_hit_ratio"])
			if tt.kind == kindMultiTurn {
				assert.Contains(t, stderr, "conversations (")
			}
		})
	}
}

// parseSim parses simulate flags as the command does.
func parseSim(t *testing.T, args ...string) *simFlags {
	t.Helper()
	var f simFlags
	fs := newSimFlagSet(&f, io.Discard)
	require.NoError(t, fs.Parse(args))
	require.NoError(t, f.validate())
	return &f
}

// thinkTimes returns the gaps between consecutive turns of each
// conversation, less the nominal answer time (20ms a token).
func thinkTimes(reqs []workload.Request) []time.Duration {
	last := map[uint64]workload.Request{}
	var out []time.Duration
	for _, r := range reqs {
		if prev, ok := last[r.Session]; ok {
			out = append(out, r.Arrival-prev.Arrival-time.Duration(prev.OutputTokens)*20*time.Millisecond)
		}
		last[r.Session] = r
	}
	return out
}

func meanDuration(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// TestSimulateLoadRegenerates checks that --load sets the synthetic rate by
// generating again, not by rescaling arrivals: the lengths stay, and
// multi-turn think times do not shrink when the load grows.
func TestSimulateLoadRegenerates(t *testing.T) {
	spec, err := fleet.ParseSpec("2xh100-llama3-8b")
	require.NoError(t, err)
	run := func(args ...string) ([]workload.Request, float64) {
		f := parseSim(t, append([]string{"--fleet", "2xh100-llama3-8b", "--synthetic"}, args...)...)
		var stderr bytes.Buffer
		reqs, capacity, err := f.workload(spec, &stderr)
		require.NoError(t, err, stderr.String())
		return reqs, capacity
	}

	low, capLow := run("--workload", kindSharedPrefix, "--requests", "3000", "--load", "0.5")
	high, capHigh := run("--workload", kindSharedPrefix, "--requests", "3000", "--load", "2")
	assert.Equal(t, capLow, capHigh)
	assert.InEpsilon(t, 0.5*capLow, workload.Summarize(low).RatePerSec, 0.05)
	assert.InEpsilon(t, 2*capLow, workload.Summarize(high).RatePerSec, 0.05)
	for i := range low {
		require.Equal(t, low[i].PromptTokens, high[i].PromptTokens, "request %d", i)
		require.Equal(t, low[i].OutputTokens, high[i].OutputTokens, "request %d", i)
		require.Equal(t, low[i].HashIDs, high[i].HashIDs, "request %d", i)
	}

	// Think times of 5s keep the conversations short against the window,
	// so few gaps are cut off by its end and the mean is unbiased.
	low, capLow = run("--workload", kindMultiTurn, "--think-time", "5s", "--requests", "8000", "--load", "0.25")
	high, _ = run("--workload", kindMultiTurn, "--think-time", "5s", "--requests", "8000", "--load", "1")
	assert.InEpsilon(t, 0.25*capLow, workload.Summarize(low).RatePerSec, 0.08)
	assert.InEpsilon(t, capLow, workload.Summarize(high).RatePerSec, 0.08)
	assert.InEpsilon(t, 5, meanDuration(thinkTimes(low)).Seconds(), 0.1, "think times keep their mean at any load")
	assert.InEpsilon(t, 5, meanDuration(thinkTimes(high)).Seconds(), 0.1, "think times keep their mean at any load")

	// The same turn of the same conversation follows its previous turn by
	// the same gap at both loads.
	type turn struct {
		session uint64
		prompt  int
	}
	gaps := func(reqs []workload.Request) map[turn]time.Duration {
		last := map[uint64]workload.Request{}
		out := map[turn]time.Duration{}
		for _, r := range reqs {
			if prev, ok := last[r.Session]; ok {
				out[turn{r.Session, r.PromptTokens}] = r.Arrival - prev.Arrival
			}
			last[r.Session] = r
		}
		return out
	}
	gapsLow, gapsHigh := gaps(low), gaps(high)
	common := 0
	for k, g := range gapsLow {
		if h, ok := gapsHigh[k]; ok {
			common++
			require.InDelta(t, g.Seconds(), h.Seconds(), 1e-6, "session %d", k.session)
		}
	}
	assert.Greater(t, common, 500)
}

// TestLoadMultiTurnFromFleet checks load's --fleet --load path for a
// multi-turn workload: the rate is load times the capacity estimate, and
// the think times are not compressed to reach it.
func TestLoadMultiTurnFromFleet(t *testing.T) {
	spec, err := fleet.ParseSpec("2xh100-llama3-8b")
	require.NoError(t, err)
	var f loadFlags
	fs := newLoadFlagSet(&f, io.Discard)
	require.NoError(t, fs.Parse([]string{"--target", "http://x", "--model", "m", "--fleet", "2xh100-llama3-8b", "--load", "1.5",
		"--workload", kindMultiTurn, "--think-time", "5s", "--duration", "600s", "--seed", "3"}))
	require.NoError(t, f.validate())
	var stderr bytes.Buffer
	reqs, err := f.workload(&stderr)
	require.NoError(t, err)
	capacity, err := f.capacity(spec, capacitySample, 3, 0)
	require.NoError(t, err)
	assert.InEpsilon(t, 1.5*capacity, workload.Summarize(reqs).RatePerSec, 0.08)
	assert.InEpsilon(t, 5, meanDuration(thinkTimes(reqs)).Seconds(), 0.1, "think times are not compressed")
	assert.Contains(t, stderr.String(), "conversations (")
}

// TestLoadMultiTurnSendsConversations checks what a live target receives
// from a multi-turn workload: the conversation as the OpenAI "user" field,
// and prompts whose leading token ids repeat where their blocks do.
func TestLoadMultiTurnSendsConversations(t *testing.T) {
	type body struct {
		Prompt    []int  `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		User      string `json:"user"`
	}
	var (
		mu     sync.Mutex
		bodies []body
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b body
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		fmt.Fprintf(w, `{"choices":[{"text":"x"}],"usage":{"completion_tokens":%d}}`, b.MaxTokens)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	code, stdout, stderr := runCLI(t, "load", "--target", srv.URL, "--model", "m", "--quiet", "--workload", kindMultiTurn,
		"--rate", "50", "--requests", "40", "--think-time", "100ms", "--prompt-mean", "20", "--output-mean", "5", "--system-prompt-tokens", "600")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "Successful requests:                    40\n")
	assert.Contains(t, stderr, "conversations (")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, bodies, 40)
	byUser := map[string][][]int{}
	for _, b := range bodies {
		require.True(t, strings.HasPrefix(b.User, "conv-"), "user %q", b.User)
		byUser[b.User] = append(byUser[b.User], b.Prompt)
		assert.Equal(t, bodies[0].Prompt[:512], b.Prompt[:512], "every conversation starts with the system prompt's whole block")
	}
	assert.Less(t, len(byUser), 40, "some conversations have several turns")
	for user, prompts := range byUser {
		slices.SortFunc(prompts, func(a, b []int) int { return len(a) - len(b) })
		for k := 1; k < len(prompts); k++ {
			whole := len(prompts[k-1]) / workload.BlockTokens * workload.BlockTokens
			assert.Equal(t, prompts[k-1][:whole], prompts[k][:whole], "%s: a turn resends the previous turn's whole blocks", user)
		}
	}
}

func TestSyntheticFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind", []string{"--workload", "bursty"}, `--workload "bursty": want one of poisson, shared-prefix, multi-turn, long-doc`},
		{"flag of another kind", []string{"--workload", kindSharedPrefix, "--turns-mean", "3"}, "--turns-mean applies only to --workload multi-turn, not shared-prefix"},
		{"kind flag with poisson", []string{"--doc-pool", "5"}, "--doc-pool applies only to --workload long-doc, not poisson"},
		{"zipf with multi-turn", []string{"--workload", kindMultiTurn, "--zipf", "2"}, "--zipf applies only to --workload shared-prefix or long-doc, not multi-turn"},
		{"short system prompt", []string{"--workload", kindSharedPrefix, "--system-prompt-tokens", "100"}, "--system-prompt-tokens 100 must be at least 512"},
		{"negative system prompt", []string{"--workload", kindMultiTurn, "--system-prompt-tokens", "-1"}, "--system-prompt-tokens -1 must not be negative"},
		{"turns over the cap", []string{"--workload", kindMultiTurn, "--turns-max", "3"}, "--turns-mean 5 must not exceed --turns-max 3"},
		{"no think time", []string{"--workload", kindMultiTurn, "--think-time", "0s"}, "--think-time 0s must be positive and at most 24h0m0s"},
		{"documents inverted", []string{"--workload", kindLongDoc, "--doc-tokens-min", "40000"}, "--doc-tokens-max 32768 must be at least --doc-tokens-min 40000"},
		{"negative zipf", []string{"--workload", kindLongDoc, "--zipf", "-1"}, "--zipf -1 must be a non-negative number"},
		{"empty pool", []string{"--workload", kindLongDoc, "--doc-pool", "0"}, "--doc-pool 0 must be in [1, 10000000]"},
		{"bad prompt mean", []string{"--prompt-mean", "0"}, "--prompt-mean 0 must be at least 1"},
		{"bad length of a kind", []string{"--workload", kindLongDoc, "--output-sigma", "-1"}, "--output-sigma -1 must be a non-negative number"},
	}
	for _, tt := range tests {
		t.Run("load "+tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"load", "--target", "http://x", "--model", "m", "--rate", "1"}, tt.args...)...)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
		})
		t.Run("simulate "+tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"simulate", "--fleet", "h100-llama3-8b", "--synthetic", "--requests", "10"}, tt.args...)...)
			assert.NotEqual(t, exitOK, code)
			assert.Contains(t, stderr, tt.want)
		})
	}

	// A trace brings its own shape: synthetic flags are mistakes.
	for _, args := range [][]string{
		{"load", "--target", "http://x", "--model", "m", "--trace", "t.csv", "--workload", kindMultiTurn, "--prompt-mean", "9"},
		{"simulate", "--fleet", "h100-llama3-8b", "--trace", "t.csv", "--workload", kindMultiTurn, "--prompt-mean", "9"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.NotEqual(t, exitOK, code, args[0])
		assert.Contains(t, stderr, "--prompt-mean applies to synthetic workloads only, not to --trace", args[0])
		assert.Contains(t, stderr, "--workload applies to synthetic workloads only, not to --trace", args[0])
	}
}

// TestSyntheticKindDefaults checks that a kind's own length defaults apply
// unless a length flag is given, and that a given flag overrides only its
// own field.
func TestSyntheticKindDefaults(t *testing.T) {
	f := parseSim(t, "--fleet", "h100-llama3-8b", "--synthetic", "--workload", kindSharedPrefix, "--prompt-sigma", "0", "--output-max", "300")
	reqs, err := f.generate(1, 0, 2000, 1)
	require.NoError(t, err)
	s := workload.Summarize(reqs)
	assert.Equal(t, 2048+300, reqs[0].PromptTokens, "sigma 0: every unique part is the kind's mean, 300")
	assert.InEpsilon(t, 150, s.OutputMean, 0.05, "the kind's output mean")
	for _, r := range reqs {
		require.LessOrEqual(t, r.OutputTokens, 300)
	}

	f = parseSim(t, "--fleet", "h100-llama3-8b", "--synthetic")
	reqs, err = f.generate(1, 0, 2000, 1)
	require.NoError(t, err)
	assert.InEpsilon(t, defaultPromptMean, workload.Summarize(reqs).PromptMean, 0.05, "poisson keeps the flag defaults")
	assert.Nil(t, reqs[0].HashIDs)
}
