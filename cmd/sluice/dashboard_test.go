package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// dashboardPath is the Grafana dashboard the test checks.
const dashboardPath = "../../deploy/grafana/sluice.json"

// TestDashboardQueriesAgainstRealPrometheus runs a real Sluice (tenants
// with the in-process limit store, admission, one instant gpuworker),
// sends it traffic with the official OpenAI client (whole answers and
// streams in every class, a 401 and a 429) while a real Prometheus scrapes
// it every second, then evaluates every panel query of
// deploy/grafana/sluice.json through Prometheus's API: each must succeed
// and return at least one sample that is a number. Panels for what needs
// Redis or a failure (store errors, sheds, retries) end in "or vector(0)";
// since that would hide a misspelt metric, the test also checks that every
// metric name the dashboard uses is one Sluice's source defines.
//
// Without a prometheus binary it skips, unless SLUICE_REQUIRE_PROMETHEUS=1.
func TestDashboardQueriesAgainstRealPrometheus(t *testing.T) {
	promBin := findPrometheus(t)
	exprs := dashboardExprs(t)
	require.NotEmpty(t, exprs)
	checkMetricNames(t, exprs)

	w := startInstantWorker(t, "m")
	cfg := writeConfig(t, `listen: 127.0.0.1:0
scrape:
  interval: 200ms
models:
  - name: m
    policy: least_request
    admission:
      max_in_flight_per_backend: 4
    backends:
      - url: `+w.URL+`
tiers:
  - name: pro
    requests_per_minute: 100000
  - name: tiny
    requests_per_minute: 1
    requests_burst: 1
tenants:
  - name: acme
    tier: pro
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
  - name: small
    tier: tiny
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-small"))+`"]
`)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- runServer(ctx, serverOptions{path: cfg, drain: 5 * time.Second, ready: ready,
			log: slog.New(slog.NewJSONHandler(&logs, nil))})
	}()
	addr := <-ready
	defer func() {
		cancel()
		require.NoError(t, <-done)
		if t.Failed() {
			t.Logf("sluice log:\n%s", logs.String())
		}
	}()

	prom := startPrometheus(t, promBin, addr)
	prom.waitFor(t, `up{job="sluice"} == 1`, 1)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := func(key string) openai.Client {
		return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(key),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	}
	acme := client("sk-acme")
	wave := func() {
		var wg sync.WaitGroup
		for _, class := range []openai.ChatCompletionNewParamsServiceTier{"priority", "default", "flex"} {
			wg.Go(func() {
				p := openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(8), ServiceTier: class,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello, fleet")}}
				for range 3 {
					_, err := acme.Chat.Completions.New(context.Background(), p)
					assert.NoError(t, err)
					st := acme.Chat.Completions.NewStreaming(context.Background(), p)
					for st.Next() {
					}
					assert.NoError(t, st.Err())
					_ = st.Close()
				}
			})
		}
		wg.Wait()
	}
	wave()
	prom.waitFor(t, `sum(sluice_time_to_first_token_seconds_count)`, 9)
	wave()

	bad := client("sk-wrong")
	_, err := bad.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	requireStatus(t, err, http.StatusUnauthorized)
	small := client("sk-small")
	for i := range 2 {
		_, err := small.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			MaxTokens: openai.Int(4), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if i == 0 {
			require.NoError(t, err)
		} else {
			requireStatus(t, err, http.StatusTooManyRequests)
		}
	}
	prom.waitFor(t, `sum(sluice_time_to_first_token_seconds_count)`, 18)
	prom.waitFor(t, `sum(sluice_http_requests_total{code="429"})`, 1)

	for _, e := range exprs {
		q := strings.NewReplacer("$__rate_interval", "1m", "${model}", ".*", "$model", ".*",
			"${tenant}", ".*", "$tenant", ".*").Replace(e.expr)
		samples, err := prom.query(q)
		if !assert.NoError(t, err, "panel %q: %s", e.panel, q) {
			continue
		}
		if !assert.NotEmpty(t, samples, "panel %q returns nothing: %s", e.panel, q) {
			continue
		}
		numbers := 0
		for _, v := range samples {
			if !math.IsNaN(v) {
				numbers++
			}
		}
		assert.Positive(t, numbers, "panel %q returns only NaN: %s", e.panel, q)
	}

	// The per-request log is on by default, one JSON line each.
	assert.Regexp(t, `"msg":"request".*"tenant":"acme","model":"m","class":"flex","backend":"`+regexp.QuoteMeta(w.URL)+`","status":200`,
		logs.String())
	assert.Regexp(t, `"msg":"request".*"status":429.*"error":"rate_limit_exceeded"`, logs.String())
}

func requireStatus(t *testing.T, err error, status int) {
	t.Helper()
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, status, apiErr.StatusCode)
}

// findPrometheus returns the prometheus binary, or skips (fails with
// SLUICE_REQUIRE_PROMETHEUS=1) when there is none.
func findPrometheus(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Prometheus")
	}
	bin, err := exec.LookPath("prometheus")
	if err == nil {
		return bin
	}
	if os.Getenv("SLUICE_REQUIRE_PROMETHEUS") == "1" {
		t.Fatal("prometheus is not installed (apt-get install prometheus) and SLUICE_REQUIRE_PROMETHEUS=1")
	}
	t.Skip("prometheus is not installed; apt-get install prometheus, or set SLUICE_REQUIRE_PROMETHEUS=1 to fail instead")
	return ""
}

// panelExpr is one query of a dashboard panel.
type panelExpr struct{ panel, expr string }

// dashboardExprs reads every panel target's expression from the dashboard,
// rows' nested panels included.
func dashboardExprs(t *testing.T) []panelExpr {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	var out []panelExpr
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			require.NoError(t, json.Unmarshal(r, &p))
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has a target without expr", p.Title)
				out = append(out, panelExpr{panel: p.Title, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return out
}

// checkMetricNames fails for a sluice_ metric name in the dashboard that
// no Go source file of the module defines as a string.
func checkMetricNames(t *testing.T, exprs []panelExpr) {
	t.Helper()
	defined := map[string]bool{}
	name := regexp.MustCompile(`"(sluice_[a-z0-9_]+)"`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	used := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	for _, e := range exprs {
		for _, n := range used.FindAllString(e.expr, -1) {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if s, ok := strings.CutSuffix(n, suffix); ok && defined[s] {
					base = s
				}
			}
			assert.True(t, defined[base], "panel %q uses %s, which no Go source defines", e.panel, n)
		}
	}
}

func startInstantWorker(t *testing.T, model string) *httptest.Server {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: "instant"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv
}

// promServer is a prometheus process this test owns.
type promServer struct {
	base   string
	client *http.Client
}

// startPrometheus runs prometheus on a free loopback port, scraping
// target's /metrics every second, with its storage in a temporary
// directory; the process is killed when the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().String()
	require.NoError(t, ln.Close())
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: ["%s"]
`, target)), 0o600))
	var out syncBuffer
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p := &promServer{base: "http://" + listen, client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
	require.Eventually(t, func() bool {
		res, err := p.client.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, "prometheus did not get ready:\n%s", &out)
	return p
}

// query evaluates an instant query now and returns its samples' values.
func (p *promServer) query(q string) ([]float64, error) {
	res, err := p.client.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, errors.New(body.Error)
	}
	var values []float64
	switch body.Data.ResultType {
	case "vector":
		var vec []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(body.Data.Result, &vec); err != nil {
			return nil, err
		}
		for _, s := range vec {
			values = append(values, sampleFloat(s.Value[1]))
		}
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(body.Data.Result, &s); err != nil {
			return nil, err
		}
		values = append(values, sampleFloat(s[1]))
	default:
		return nil, fmt.Errorf("result type %s", body.Data.ResultType)
	}
	return values, nil
}

func sampleFloat(v any) float64 {
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// waitFor waits until q's first sample is at least min: Prometheus has
// scraped what the test did so far.
func (p *promServer) waitFor(t *testing.T, q string, min float64) {
	t.Helper()
	var last []float64
	require.Eventually(t, func() bool {
		v, err := p.query(q)
		last = v
		return err == nil && len(v) > 0 && v[0] >= min
	}, 10*time.Second, 100*time.Millisecond, "%s stayed below %v (last %v)", q, min, last)
}
