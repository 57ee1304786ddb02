package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redisServer is a redis-server process this test owns, on a free port,
// so that it can be stopped and started again mid-run.
type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed; .ci/run installs it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	r := &redisServer{t: t, port: port}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.t.TempDir())
	require.NoError(r.t, r.cmd.Start())
	require.Eventually(r.t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = c.Write([]byte("PING\r\n"))
		b := make([]byte, 5)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := c.Read(b)
		return string(b[:n]) == "+PONG"
	}, 10*time.Second, 20*time.Millisecond)
}

func (r *redisServer) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// buildSluice builds this command once per test binary run.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

var listenLine = regexp.MustCompile(`"msg":"sluice listening","addr":"([^"]+)"`)

// startReplica runs `sluice serve` as its own process and returns its address.
func startReplica(t *testing.T, bin, config string, args ...string) string {
	t.Helper()
	addr, _ := startReplicaProcess(t, bin, config, args...)
	return addr
}

// startReplicaProcess is startReplica that also returns the process, for
// a test to kill.
func startReplicaProcess(t *testing.T, bin, config string, args ...string) (string, *os.Process) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--config", config, "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_REDIS_URL=")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	addrs := make(chan string, 1)
	var logs syncBuffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	select {
	case a := <-addrs:
		return a, cmd.Process
	case <-time.After(20 * time.Second):
		t.Fatalf("replica did not start:\n%s", logs.String())
		return "", nil
	}
}

// tenantConfig serves model m from worker with a tenant "acme" (key
// sk-acme) on a tier limited as limits says, and a tenant "tok" (key
// sk-tok) limited to 1,000 output tokens at once, 60 a minute after.
func tenantConfig(t *testing.T, worker, limits, store string) string {
	t.Helper()
	return writeConfig(t, `listen: 127.0.0.1:0
scrape:
  enabled: false
models:
  - name: m
    policy: round_robin
    backends:
      - url: `+worker+`
tiers:
  - name: t
`+limits+`
  - name: tokens
    output_tokens_per_minute: 60
    output_tokens_burst: 1000
    default_max_tokens: 10
tenants:
  - name: acme
    tier: t
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
  - name: tok
    tier: tokens
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-tok"))+`"]
limits:
`+store)
}

// burst sends n chat requests (max_tokens 10) as tenant acme spread round
// robin over addrs with concurrency c, and counts the answers by status.
func burst(t *testing.T, addrs []string, n, c int) map[int]int {
	return burstAs(t, "sk-acme", addrs, n, c)
}

func burstAs(t *testing.T, key string, addrs []string, n, c int) map[int]int {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: c}
	defer tr.CloseIdleConnections()
	clients := make([]openai.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = openai.NewClient(option.WithBaseURL("http://"+a+"/v1/"), option.WithAPIKey(key),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	}
	var next atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				cl := clients[i%len(clients)]
				_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
					Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
					MaxTokens: openai.Int(10),
				})
				code := http.StatusOK
				if err != nil {
					var apiErr *openai.Error
					if !assert.ErrorAs(t, err, &apiErr) {
						return
					}
					code = apiErr.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// TestReplicasShareOneLimitThroughRedis runs three sluice processes on one
// Redis and checks that one tenant's burst spread over all three admits
// what one replica admits, and what the tier says: 100 requests of 300 (the
// rate of one each ten seconds adds at most one or two during a run; at one
// a second a run slowed by a busy machine refilled 9 more than another). With the
// in-process store each replica would admit its own 100.
func TestReplicasShareOneLimitThroughRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redis := startRedis(t)
	bin := buildSluice(t)
	worker := startWorker(t, "m")
	limits := "    requests_per_minute: 6\n    requests_burst: 100\n"

	// A generous Redis timeout: the default 50 ms fails open on a loaded
	// test machine, and this test measures the sharing, not fail-open.
	shared := tenantConfig(t, worker.URL, limits, "  redis_url: "+redis.url()+"\n  key_prefix: shared\n  timeout: 2s\n")
	var three []string
	for range 3 {
		three = append(three, startReplica(t, bin, shared))
	}
	got := burst(t, three, 300, 12)
	assert.Zero(t, got[http.StatusInternalServerError]+got[http.StatusBadGateway]+got[http.StatusServiceUnavailable])
	assert.Equal(t, 300, got[http.StatusOK]+got[http.StatusTooManyRequests])
	assert.InDelta(t, 100, got[http.StatusOK], 5, "three replicas admit the tier's burst (±5%%), got %v", got)

	single := tenantConfig(t, worker.URL, limits, "  redis_url: "+redis.url()+"\n  key_prefix: single\n  timeout: 2s\n")
	one := startReplica(t, bin, single)
	gotOne := burst(t, []string{one}, 300, 12)
	assert.InDelta(t, gotOne[http.StatusOK], got[http.StatusOK], 5, "three replicas admit what one does: %v vs %v", got, gotOne)

	// For contrast: three replicas each with their own in-process store
	// admit the burst three times over.
	local := tenantConfig(t, worker.URL, limits, "  key_prefix: local\n")
	var apart []string
	for range 3 {
		apart = append(apart, startReplica(t, bin, local))
	}
	gotApart := burst(t, apart, 300, 12)
	assert.Greater(t, gotApart[http.StatusOK], 250, "in-process limits multiply by the replicas: %v", gotApart)
	t.Logf("shared Redis: %v; one replica: %v; three in-process stores: %v", got, gotOne, gotApart)

	// Tokens: each request reserves its max_tokens (10) and is charged
	// what it used; over the three replicas the tenant is charged its
	// burst of 1,000 output tokens, within 5%.
	gotTok := burstAs(t, "sk-tok", three, 300, 12)
	var charged float64
	assert.Eventually(t, func() bool { // a handler settles just after its client has the last byte
		charged = 0
		for _, a := range three {
			charged += sampleValue(t, scrapeText(t, a), `sluice_tenant_tokens_total{kind="output",tenant="tok",tier="tokens"}`)
		}
		return charged >= 950 && charged <= 1050
	}, 5*time.Second, 20*time.Millisecond, "output tokens charged over three replicas within 5%% of 1,000 (%v)", gotTok)
	t.Logf("tokens: %v answers, %.0f output tokens charged", gotTok, charged)
}

// sampleValue reads one sample's value from a Prometheus text page (0 when
// the series is absent).
func sampleValue(t *testing.T, page, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// TestRedisDownFailsOpenAndLimitsReturn stops Redis under three replicas:
// fail-open keeps serving with no 5xx, and once Redis is back the limits
// hold again by themselves. The rate is one a minute, so that the burst
// does not refill while a busy machine takes seconds over the 60 requests
// (at 60 a minute, 25 passed instead of 20 under load).
func TestRedisDownFailsOpenAndLimitsReturn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redis := startRedis(t)
	bin := buildSluice(t)
	worker := startWorker(t, "m")
	cfg := tenantConfig(t, worker.URL, "    requests_per_minute: 1\n    requests_burst: 20\n",
		"  redis_url: "+redis.url()+"\n  timeout: 50ms\n")
	var addrs []string
	for range 3 {
		addrs = append(addrs, startReplica(t, bin, cfg))
	}
	before := burst(t, addrs, 60, 6)
	assert.Equal(t, 20, before[http.StatusOK], "limited while Redis is up: %v", before)

	redis.stop()
	during := burst(t, addrs, 60, 6)
	assert.Equal(t, map[int]int{http.StatusOK: 60}, during, "fail-open: every request served, none a 5xx")

	redis.start() // empty: the tenant's burst is whole again
	require.Eventually(t, func() bool {
		return burst(t, addrs, 30, 6)[http.StatusTooManyRequests] > 0
	}, 15*time.Second, 100*time.Millisecond, "limits hold again after Redis returns")
	after := burst(t, addrs, 60, 6)
	assert.Equal(t, 60, after[http.StatusTooManyRequests], "the burst is spent again: %v", after)
	for _, a := range addrs {
		page := scrapeText(t, a)
		assert.Regexp(t, `sluice_quota_decisions_total\{dimension="",result="failed_open"\} \d+`, page)
		assert.Contains(t, page, "sluice_quota_store_up 1")
	}
}

func scrapeText(t *testing.T, addr string) string {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(res.Body).WriteTo(&b)
	require.NoError(t, err)
	return b.String()
}

// TestSlotsLastAsLongAsTheirRequestsAndEndWithTheirReplica: with a lease
// TTL of 1 s, a request running on replica A for several TTLs keeps its
// tenant's one concurrency slot and its backend's one admission slot on
// every replica (A renews them), and once A is killed both come back
// within about a TTL. Until 2026-12-02 leases were not renewed: the
// request lost both slots after one TTL, so the TTL defaulted to 10 minutes,
// and a killed replica's slots stayed taken that long.
func TestSlotsLastAsLongAsTheirRequestsAndEndWithTheirReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redis := startRedis(t)
	bin := buildSluice(t)
	_, url := slowWorker(t)
	cfg := writeConfig(t, `listen: 127.0.0.1:0
scrape:
  enabled: false
models:
  - name: m
    admission:
      max_in_flight_per_backend: 1
      replicas: 2
    backends:
      - url: `+url+`
tiers:
  - name: one
    concurrent_requests: 1
  - name: open
tenants:
  - name: acme
    tier: one
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
  - name: other
    tier: open
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-other"))+`"]
limits:
  redis_url: `+redis.url()+`
  lease_ttl: 1s
`)
	a, procA := startReplicaProcess(t, bin, cfg)
	b := startReplica(t, bin, cfg)
	as := func(addr, key string) openai.Client {
		return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(key),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	}
	status := func(err error) int {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.StatusCode
		}
		require.NoError(t, err)
		return http.StatusOK
	}

	// A long stream through A holds acme's slot and the backend's.
	ca, cb, co := as(a, "sk-acme"), as(b, "sk-acme"), as(b, "sk-other")
	hold := ca.Chat.Completions.NewStreaming(context.Background(), chat("", 5000))
	require.True(t, hold.Next(), "the long request streams through replica A")
	defer hold.Close()
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs

	_, err := cb.Chat.Completions.New(context.Background(), chat("", 2))
	assert.Equal(t, http.StatusTooManyRequests, status(err), "acme's one slot is still held through B, 2.5 TTLs on")
	waited := make(chan error, 1)
	go func() { // another tenant's request waits on B for the backend's one slot
		_, err := co.Chat.Completions.New(context.Background(), chat("", 2))
		waited <- err
	}()
	time.Sleep(time.Second)
	select {
	case err := <-waited:
		t.Fatalf("a request ran beside the long one on a backend with a budget of 1 (err %v)", err)
	default:
	}

	require.NoError(t, procA.Kill()) // A dies without releasing anything
	killed := time.Now()
	select {
	case err := <-waited:
		require.NoError(t, err)
		t.Logf("the backend's slot came back %v after A was killed", time.Since(killed).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting request did not run within 15 s of A's death")
	}
	assert.Eventually(t, func() bool {
		_, err := cb.Chat.Completions.New(context.Background(), chat("", 2))
		return status(err) == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond, "acme's slot comes back once A stops renewing it")
	t.Logf("acme's slot came back %v after A was killed", time.Since(killed).Round(time.Millisecond))
}

// TestReadinessFollowsTheLimitStoreWithoutTraffic: with limits failing
// closed, /readyz says 503 once Redis stops and 200 once it is back, with
// no request sent meanwhile, on a replica running when Redis stopped and
// on one started while it was down. Before, only a client's request
// (which an unready replica is not sent) changed it, so after a Redis blip
// every replica stayed out of its load balancer.
func TestReadinessFollowsTheLimitStoreWithoutTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redis := startRedis(t)
	bin := buildSluice(t)
	worker := startWorker(t, "m")
	cfg := tenantConfig(t, worker.URL, "    requests_per_minute: 60\n",
		"  redis_url: "+redis.url()+"\n  fail_open: false\n")
	ready := func(addr string) int {
		res, err := http.Get("http://" + addr + "/readyz")
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}
	running := startReplica(t, bin, cfg)
	require.Equal(t, http.StatusOK, ready(running))

	redis.stop()
	assert.Eventually(t, func() bool { return ready(running) == http.StatusServiceUnavailable },
		10*time.Second, 50*time.Millisecond, "unready once Redis is down, without traffic")
	started := startReplica(t, bin, cfg)
	assert.Eventually(t, func() bool { return ready(started) == http.StatusServiceUnavailable },
		10*time.Second, 50*time.Millisecond, "a replica started while Redis is down is not ready")

	redis.start()
	for _, a := range []string{running, started} {
		assert.Eventually(t, func() bool { return ready(a) == http.StatusOK },
			10*time.Second, 50*time.Millisecond, "ready again once Redis answers, without traffic")
		assert.Contains(t, scrapeText(t, a), "sluice_quota_store_up 1")
	}
}

// TestServeStopsWhenRedisRefusesTheURL: a Redis that answers and refuses
// the URL's user and password, or its database number, stops serve with
// the field named and the password redacted (it was taken for an outage:
// limits failed open for good, logged as Redis down). A Redis that does
// not answer is an outage, and serve starts.
func TestServeStopsWhenRedisRefusesTheURL(t *testing.T) {
	redis := startRedis(t)
	cfg := writeConfig(t, "listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n")
	for _, tt := range []struct{ url, want string }{
		{fmt.Sprintf("redis://bob:s3cret@127.0.0.1:%d/0", redis.port), "Redis refused the password (or user)"},
		{fmt.Sprintf("redis://127.0.0.1:%d/99", redis.port), "Redis refused the database number"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := runServer(ctx, serverOptions{path: cfg, redisURL: tt.url, drain: time.Second, log: slog.New(slog.DiscardHandler)})
		cancel()
		require.Error(t, err, tt.url)
		assert.Contains(t, err.Error(), "limits.redis_url (or --redis-url)")
		assert.Contains(t, err.Error(), tt.want)
		assert.NotContains(t, err.Error(), "s3cret")
	}

	down := startRedis(t)
	down.stop()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: cfg, redisURL: down.url(), drain: time.Second, ready: ready, log: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped with Redis down: %v", err)
	}
	stop()
	require.NoError(t, <-done)
}
