package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// startWorker serves a real simulated gpuworker on loopback.
func startWorker(t *testing.T) string {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: "m", Profile: "instant"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		wg.Wait()
	})
	return srv.URL
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	return got
}

func TestLoadAgainstGPUWorker(t *testing.T) {
	target := startWorker(t)
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "report.json")
			args := []string{"load", "--target", target, "--model", "m", "--rate", "200", "--requests", "30",
				"--duration", "10s", "--prompt-mean", "64", "--output-mean", "8", "--json", jsonPath, "--seed", "3"}
			if stream {
				args = append(args, "--stream")
			}
			code, stdout, stderr := runCLI(t, args...)
			require.Equal(t, exitOK, code, stderr)
			assert.Contains(t, stdout, "Successful requests:                    30\n")
			assert.Contains(t, stderr, "sluice-bench load: 30 requests over")
			assert.Contains(t, stderr, "sent 30  done 30  failed 0  in-flight 0")

			got := readJSON(t, jsonPath)
			assert.EqualValues(t, 30, got["completed"])
			assert.EqualValues(t, 0, got["failed"])
			assert.Positive(t, got["request_throughput"])
			assert.Positive(t, got["output_throughput"])
			for _, key := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"} {
				require.IsType(t, map[string]any{}, got[key], key)
			}
			if stream {
				assert.Positive(t, got["itl_ms"].(map[string]any)["p50"])
			}
		})
	}
}

func TestLoadTraceReplay(t *testing.T) {
	var prompts atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt    []int `json:"prompt"`
			MaxTokens int   `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompts.Add(int64(len(body.Prompt)))
		fmt.Fprintf(w, `{"choices":[{"text":"x"}],"usage":{"completion_tokens":%d}}`, body.MaxTokens)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	trace := filepath.Join(t.TempDir(), "t.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(
		`{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}
{"timestamp": 10, "input_length": 100, "output_length": 3, "hash_ids": [0]}
{"timestamp": 20, "input_length": 9000, "output_length": 3, "hash_ids": []}
`), 0o600))
	code, stdout, stderr := runCLI(t, "load", "--target", srv.URL, "--model", "m", "--trace", trace, "--max-context", "1000", "--quiet")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "dropped 1 requests longer than 1000 tokens")
	assert.Contains(t, stdout, "Successful requests:                    2\n")
	assert.Contains(t, stdout, "Total generated tokens:                 5\n")
	assert.EqualValues(t, 700, prompts.Load())
	assert.NotContains(t, stderr, "in-flight", "--quiet has no progress line")
}

func TestLoadUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, exitUsage, "Usage: sluice-bench"},
		{"unknown command", []string{"replay"}, exitUsage, `unknown command "replay"`},
		{"missing flags", []string{"load"}, exitUsage, "--target is required\n--model is required\n--rate must be positive"},
		{"bad flag", []string{"load", "--rate", "fast"}, exitUsage, "invalid value"},
		{"extra arg", []string{"load", "--target", "http://x", "--model", "m", "--rate", "1", "oops"}, exitUsage, `unexpected argument "oops"`},
		{"bad target", []string{"load", "--target", "x", "--model", "m", "--rate", "1"}, exitUsage, "want an http or https URL"},
		{"missing trace", []string{"load", "--target", "http://x", "--model", "m", "--trace", "nope.csv"}, exitError, "cannot read trace: open nope.csv: no such file"},
		{"format without trace", []string{"load", "--target", "http://x", "--model", "m", "--rate", "1", "--trace-format", "azure"}, exitUsage, "--trace-format needs --trace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
}

// A command line that cannot run fails before the workload is built and
// described, and a trace that is not there is reported as such, not as a
// name whose extension tells no format.
func TestLoadRejectsBeforeTheWorkload(t *testing.T) {
	dir := t.TempDir()
	noExt := filepath.Join(dir, "trace")
	txt := filepath.Join(dir, "t.txt")
	require.NoError(t, os.WriteFile(txt, []byte("x\n"), 0o600))
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not a URL", []string{"load", "--target", "notaurl", "--model", "m", "--rate", "1"}, exitUsage, `--target: target "notaurl": want an http or https URL`},
		{"second target not a URL", []string{"load", "--target", "http://127.0.0.1:1,ftp://x", "--model", "m", "--rate", "1"}, exitUsage, `target "ftp://x": want an http or https URL`},
		{"missing trace without extension", []string{"load", "--target", "http://x", "--model", "m", "--trace", noExt}, exitError, "cannot read trace: open " + noExt + ": no such file or directory"},
		{"simulate missing trace", []string{"simulate", "--fleet", "h100-llama3-8b", "--trace", noExt}, exitError, "cannot read trace: open " + noExt + ": no such file or directory"},
		{"unknown extension", []string{"load", "--target", "http://x", "--model", "m", "--trace", txt}, exitError, "cannot tell the format from the extension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			assert.Equal(t, tt.code, code, stderr)
			assert.Contains(t, stderr, tt.want)
			assert.NotContains(t, stderr, "requests over", "nothing is described before the error")
			assert.Empty(t, stdout)
		})
	}
}

func TestHelp(t *testing.T) {
	code, stdout, _ := runCLI(t, "help")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stdout, "load")
	code, _, stderr := runCLI(t, "load", "-h")
	assert.Equal(t, exitOK, code)
	assert.True(t, strings.Contains(stderr, "--trace-format") || strings.Contains(stderr, "-trace-format"))
}

func TestLoadInterrupted(t *testing.T) {
	started := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: only then does the server watch for the
		// client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case started <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- cli(ctx, []string{"load", "--target", srv.URL, "--model", "m", "--rate", "5", "--duration", "1h", "--quiet"}, &out, &errOut)
	}()
	<-started
	cancel()
	code := <-done
	assert.Equal(t, exitInterrupted, code)
	assert.Contains(t, errOut.String(), "interrupted")
	assert.Contains(t, out.String(), "Successful requests:                    0\n")
	assert.Contains(t, out.String(), "Cancelled requests:")
}

func TestLoadFleetFlagValidation(t *testing.T) {
	base := []string{"load", "--target", "http://x", "--model", "m"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"fleet without load", []string{"--fleet", "2xh100-llama3-8b"}, "--fleet and --load must be given together"},
		{"load without fleet", []string{"--load", "0.5"}, "--fleet and --load must be given together"},
		{"load with rate", []string{"--fleet", "2xh100-llama3-8b", "--load", "0.5", "--rate", "3"}, "--rate and --load are exclusive"},
		{"negative load", []string{"--fleet", "2xh100-llama3-8b", "--load", "-1"}, "--load must be a positive number"},
		{"bad spec", []string{"--fleet", "3xtpu-v9", "--load", "0.5"}, "--fleet:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(slices.Clone(base), tt.args...)...)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
}

func TestLoadRate(t *testing.T) {
	rate, err := loadRate(10, 0.8)
	require.NoError(t, err)
	assert.InDelta(t, 8, rate, 1e-9)
	for _, c := range []float64{0, math.Inf(1), math.NaN()} {
		_, err := loadRate(c, 0.8)
		assert.Error(t, err, "capacity %v", c)
	}
	_, err = loadRate(10, 0)
	assert.Error(t, err)
}

// TestLoadWorkloadFromFleet checks that --fleet and --load set the arrival
// rate to load times the capacity estimate, for synthetic load and a trace,
// and that --time-scale leaves that simulated-time rate alone.
func TestLoadWorkloadFromFleet(t *testing.T) {
	spec, err := fleet.ParseSpec("2xh100-llama3-8b")
	require.NoError(t, err)
	for _, scale := range []float64{1, 10} {
		f := loadFlags{
			target: "http://x", model: "m", fleet: "2xh100-llama3-8b", load: 0.5, timeScale: scale,
			duration: 200 * time.Second, seed: 1,
			shapeFlags: shapeFlags{promptMean: 512, promptSD: 0.5, promptMax: 8192,
				outputMean: 128, outputSD: 0.5, outputMax: 2048},
		}
		require.NoError(t, f.validate())
		var stderr bytes.Buffer
		reqs, err := f.workload(&stderr)
		require.NoError(t, err)
		want := 0.5 * fleet.EstimateCapacity(spec, reqs)
		assert.InEpsilon(t, want, workload.Summarize(reqs).RatePerSec, 0.05)
		assert.Contains(t, stderr.String(), "estimated capacity")
		if scale != 1 {
			assert.Contains(t, stderr.String(), "wall-clock at --time-scale 10")
		}
	}

	// A trace keeps its shape and is rescaled to the offered rate.
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	for i := range 200 {
		fmt.Fprintf(&b, "2023-11-16 18:15:%02d.%03d0000,%d,%d\n", i/10, (i%10)*100, 300+i, 100)
	}
	require.NoError(t, os.WriteFile(trace, []byte(b.String()), 0o644))
	f := loadFlags{target: "http://x", model: "m", trace: trace, fleet: "2xh100-llama3-8b", load: 2, timeScale: 1}
	require.NoError(t, f.validate())
	reqs, err := f.workload(io.Discard)
	require.NoError(t, err)
	require.Len(t, reqs, 200)
	assert.InEpsilon(t, 2*fleet.EstimateCapacity(spec, reqs), workload.Summarize(reqs).RatePerSec, 1e-6)
}

func TestLoadOutcomes(t *testing.T) {
	target := startWorker(t)
	path := filepath.Join(t.TempDir(), "outcomes.csv")
	code, _, stderr := runCLI(t, "load", "--target", target, "--model", "m", "--rate", "200", "--requests", "40",
		"--duration", "10s", "--prompt-mean", "64", "--output-mean", "8", "--stream", "--seed", "3",
		"--mix", "priority=0.5,flex=0.5", "--outcomes", path)
	require.Equal(t, exitOK, code, stderr)
	rows, col, num := readOutcomes(t, path)
	require.Len(t, rows, 1+40)
	assert.Equal(t, loadOutcomesHeader, rows[0])
	classes := map[string]int{}
	for i, row := range rows[1:] {
		assert.Equal(t, strconv.Itoa(i), row[col["request"]])
		assert.Equal(t, "true", row[col["ok"]], row[col["error"]])
		assert.Empty(t, row[col["tenant"]])
		classes[row[col["class"]]]++
		assert.Positive(t, num(row, "ttft_ms"))
		assert.GreaterOrEqual(t, num(row, "e2e_ms"), num(row, "ttft_ms"))
		assert.Positive(t, num(row, "prompt_tokens"))
		assert.Positive(t, num(row, "output_tokens"))
		if i > 0 {
			assert.GreaterOrEqual(t, num(row, "arrival_s"), num(rows[i], "arrival_s"), "in workload order")
		}
	}
	assert.Equal(t, 40, classes["priority"]+classes["flex"], "every request has a drawn class")
	assert.Positive(t, classes["priority"])
	assert.Positive(t, classes["flex"])
}

// readOutcomes reads an --outcomes file: its rows (the header first), each
// column's index by name, and a reader of a row's number in a column.
func readOutcomes(t *testing.T, path string) (rows [][]string, col map[string]int, num func(row []string, name string) float64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err = csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	col = map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	num = func(row []string, name string) float64 {
		v, err := strconv.ParseFloat(row[col[name]], 64)
		require.NoError(t, err, name)
		return v
	}
	return rows, col, num
}

// TestLoadFailsWhenEveryRequestFails: a run in which nothing succeeded (a
// wrong key: every answer a 401) exits 1, so that a script does not take
// its report for a measurement (it exited 0).
func TestLoadFailsWhenEveryRequestFails(t *testing.T) {
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
	}))
	t.Cleanup(refuse.Close)
	code, _, stderr := runCLI(t, "load", "--target", refuse.URL, "--model", "m", "--rate", "200", "--requests", "5", "--duration", "10s")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "sluice-bench load: all 5 requests failed")
}
