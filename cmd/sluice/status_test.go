package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatusPage serves a real fleet of two gpuworkers through Sluice with
// tenants and admission, sends traffic, and renders the admin status page
// in headless Chromium: the rendered page must show the live fleet, the
// tenants' use and charts with points; the page alone holds no data.
// Chromium missing skips it unless SLUICE_REQUIRE_CHROMIUM=1.
// SLUICE_STATUS_SCREENSHOT=FILE also saves a screenshot of the page.
func TestStatusPage(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("chromium not found and SLUICE_REQUIRE_CHROMIUM=1: apt-get install -y chromium")
		}
		t.Skip("chromium not found; apt-get install -y chromium (SLUICE_REQUIRE_CHROMIUM=1 makes this a failure)")
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	_, a := slowWorker(t)
	_, b := slowWorker(t)
	path := writeConfig(t, `listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
scrape:
  interval: 250ms
models:
  - name: m
    policy: least_request
    admission:
      max_in_flight_per_backend: 3
    backends:
      - url: `+a+`
      - url: `+b+`
tiers:
  - name: gold
    requests_per_minute: 3000
    output_tokens_per_minute: 60000
    concurrent_requests: 16
    tokens_per_day: 2000000
    priority: 1
  - name: free
    requests_per_minute: 600
    output_tokens_per_minute: 6000
    concurrent_requests: 3
tenants:
  - name: acme
    tier: gold
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
  - name: hobbyist
    tier: free
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-hobby"))+`"]
`)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: 2 * time.Second, ready: ready,
			log: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	addr := <-ready
	adminAddr := adminAddrOf(t, &logs)

	// Traffic until the end of the test: acme's eight clients keep the
	// backends at their admission budget, so requests queue; hobbyist's
	// four run into the tier's three at once.
	tctx, stopTraffic := context.WithCancel(context.Background())
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	var traffic sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	shot := os.Getenv("SLUICE_STATUS_SCREENSHOT")
	for i := range 12 {
		key, tier := "sk-acme", []string{"priority", "default", "flex"}[i%3]
		if i >= 8 {
			key = "sk-hobby"
		}
		traffic.Go(func() {
			if shot != "" { // a ramp, for the charts
				select {
				case <-time.After(time.Duration(i) * 4 * time.Second):
				case <-tctx.Done():
				}
			}
			c := &http.Client{Transport: tr}
			for n := 0; tctx.Err() == nil; n++ {
				body := fmt.Sprintf(`{"model":"m","stream":%t,"max_tokens":%d,"service_tier":%q,`+
					`"messages":[{"role":"user","content":"tell me about sluice gates, take %d"}]}`, n%2 == 0, 16+n%24, tier, n)
				req, err := http.NewRequestWithContext(tctx, "POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+key)
				res, err := c.Do(req)
				if err != nil {
					continue // the test is ending
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				mu.Lock()
				codes[res.StatusCode]++
				mu.Unlock()
				if res.StatusCode == http.StatusTooManyRequests {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	defer func() {
		stopTraffic()
		traffic.Wait()
		tr.CloseIdleConnections()
		stop()
		require.NoError(t, <-done)
	}()
	// Three samples of the history (every 2 s) under load; a minute and a
	// half of it for a screenshot.
	if shot != "" {
		time.Sleep(90 * time.Second)
	}
	time.Sleep(4500 * time.Millisecond)
	mu.Lock()
	require.Positive(t, codes[http.StatusOK], "%v", codes)
	mu.Unlock()

	page := "http://" + adminAddr + "/status"
	if shot != "" {
		render(t, browser, "--screenshot="+shot, "--window-size=1280,1000", "--hide-scrollbars", page+"#token=admin-secret")
		t.Logf("screenshot: %s", shot)
	}
	// The page is rendered after the traffic: Chromium starts faster on
	// the test's two cores without it, and the page shows the history.
	stopTraffic()
	traffic.Wait()
	dom := render(t, browser, "--dump-dom", page+"#token=admin-secret")
	for _, want := range []string{a, b, ">closed<", ">in routing<", ">acme<", ">hobbyist<", ">gold<", ">live<",
		">m · priority<", "Attempts/s per backend", "Tokens/s per tenant"} {
		assert.Contains(t, dom, want)
	}
	assert.Regexp(t, `>[1-9][0-9.k]* / 3000<`, dom, "acme's requests in the last minute against its tier's limit")
	pts := regexp.MustCompile(`<polyline points="([^"]+)"`).FindAllStringSubmatch(dom, -1)
	require.NotEmpty(t, pts, "charts drawn")
	most := 0
	for _, p := range pts {
		most = max(most, len(strings.Fields(p[1])))
	}
	assert.GreaterOrEqual(t, most, 2, "a chart line with history")
	assert.NotContains(t, dom, "admin-secret", "the token is not left in the page")

	// The page itself holds no data: it is served without the token.
	res, err := http.Get(page)
	require.NoError(t, err)
	html, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.NotContains(t, string(html), a)
	res, err = http.Get("http://" + adminAddr + "/admin/status")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "its data needs the token")
	http.DefaultClient.CloseIdleConnections()
}

// render runs headless Chromium on url with args and returns its output.
func render(t *testing.T, browser string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=2000"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("chromium %v took %v", args, time.Since(start))
	require.NoError(t, err, "chromium: %s", stderr.String())
	return string(out)
}
