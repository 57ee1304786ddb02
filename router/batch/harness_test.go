package batch_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/batch"
)

// The models served: model by every tenant's tier, other only by tiers
// that list no models.
const (
	model = "llama-3-8b"
	other = "llama-3-70b"
)

// setup says what a fixture runs.
type setup struct {
	profile string  // the worker's; default instant
	speedup float64 // the worker's; 0 means 1
	// budget, when positive, puts an admission gate on model with this
	// many requests in flight per backend; queue and flexWait tune it.
	budget, queue int
	flexWait      time.Duration
	// tenants are served with key "sk-" + name; default acme (tier pro,
	// model only) and rival (tier pro).
	tenants []*auth.Tenant
	dir     string // the data directory; default a new one
	// store, when set, is the Store (else a DiskStore in dir).
	store  batch.Store
	svc    batch.Options
	runner batch.RunnerOptions
}

// fixture is a real Sluice with a real gpuworker behind it, the batch API
// mounted and a Runner running its batches.
type fixture struct {
	url    string
	dir    string
	store  *batch.DiskStore // nil with setup.store
	worker *gpuworker.Worker
	router http.Handler
	reg    *prometheus.Registry
	svc    *batch.Service
	gate   *admission.Gate // the model's, with setup.budget
	// stopRunner stops the runner and waits for it (a no-op once done).
	stopRunner func()
}

func defaultTenants() []*auth.Tenant {
	return []*auth.Tenant{
		{Name: "acme", Tier: "pro", Models: []string{model}, DefaultMaxTokens: 16},
		{Name: "rival", Tier: "pro", DefaultMaxTokens: 16},
	}
}

func start(t *testing.T, s setup) *fixture {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: cmp.Or(s.profile, gpuworker.InstantProfile),
		Speedup: s.speedup})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	wsrv := httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		wsrv.Close()
		stopWorker()
		require.NoError(t, <-workerDone)
	})

	var routes []*router.Route
	for _, m := range []string{model, other} {
		e, err := backends.NewEndpoint(wsrv.URL, 1)
		require.NoError(t, err)
		pool, err := backends.NewPool(m, []*backends.Endpoint{e})
		require.NoError(t, err)
		picker, err := leastrequest.New(nil)
		require.NoError(t, err)
		rte := &router.Route{Pool: pool, Picker: picker}
		if m == model && s.budget > 0 {
			var wait [admission.NumClasses]time.Duration
			wait[admission.Flex] = s.flexWait
			rte.Gate, err = admission.NewGate(pool, picker, admission.Options{
				Budget: func(*backends.Endpoint) int { return s.budget }, QueueSize: cmp.Or(s.queue, 64), MaxWait: wait})
			require.NoError(t, err)
		}
		routes = append(routes, rte)
	}
	gate := routes[0].Gate
	table, err := router.NewTable(routes)
	require.NoError(t, err)

	tenants := s.tenants
	if tenants == nil {
		tenants = defaultTenants()
	}
	keys := make([][]auth.Digest, len(tenants))
	for i, tn := range tenants {
		keys[i] = []auth.Digest{auth.HashKey("sk-" + tn.Name)}
	}
	dir, err := auth.NewDirectory(tenants, keys)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	lim, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New(), Metrics: reg})
	require.NoError(t, err)

	f := &fixture{dir: s.dir, worker: w, reg: reg, gate: gate}
	if f.dir == "" {
		f.dir = t.TempDir()
	}
	store := s.store
	if store == nil {
		f.store, err = batch.OpenDiskStore(f.dir + "/state")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, f.store.Close()) })
		store = f.store
	}
	so := s.svc
	so.Store, so.Dir, so.Owner = store, f.dir+"/files", ownerOf
	f.svc, err = batch.New(so)
	require.NoError(t, err)

	tr := &http.Transport{}
	rt, err := router.New(router.Options{Table: table, Tenants: dir, Limiter: lim, Metrics: reg, Batch: f.svc,
		Transport: tr})
	require.NoError(t, err)
	f.router = rt.Handler()
	srv := httptest.NewServer(f.router)
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	f.url = srv.URL

	ro := s.runner
	ro.Handler, ro.RunAs, ro.Metrics = f.router, runAs, reg
	ro.Interval = cmp.Or(ro.Interval, 20*time.Millisecond)
	f.stopRunner = f.run(t, ro)
	return f
}

// run starts a runner of f's batches; the func returned stops it.
func (f *fixture) run(t *testing.T, o batch.RunnerOptions) func() {
	t.Helper()
	r, err := batch.NewRunner(f.svc, o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// ownerOf and runAs are what cmd/sluice wires in.
func ownerOf(ctx context.Context) batch.Owner {
	t := auth.TenantFrom(ctx)
	if t == nil {
		return batch.Owner{}
	}
	return batch.Owner{Tenant: t.Name, Tier: t.Tier, DefaultMaxTokens: t.DefaultMaxTokens,
		NoFlex: len(t.Classes) > 0 && !slices.Contains(t.Classes, "flex")}
}

func runAs(ctx context.Context, tenant string, draining <-chan struct{}) context.Context {
	ctx = admission.WithBatch(ctx, draining)
	if tenant == "" {
		return ctx
	}
	return auth.WithTenant(ctx, &auth.Tenant{Name: tenant})
}

// client is the official OpenAI client with key, without retries.
func (f *fixture) client(t *testing.T, key string) openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return openai.NewClient(option.WithBaseURL(f.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr}))
}

func chatLine(id, m string, maxTokens int) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"hello %s"}],"max_tokens":%d,"ignore_eos":true}}`,
		id, m, id, maxTokens)
}

func chatLines(n int, m string, maxTokens int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(chatLine(fmt.Sprintf("req-%d", i), m, maxTokens))
		b.WriteByte('\n')
	}
	return b.String()
}

func upload(t *testing.T, c openai.Client, content string) *openai.FileObject {
	t.Helper()
	f, err := c.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(strings.NewReader(content), "input.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	return f
}

func create(t *testing.T, c openai.Client, fileID string, endpoint openai.BatchNewParamsEndpoint) *openai.Batch {
	t.Helper()
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: fileID, Endpoint: endpoint,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	return b
}

// await polls batch id until its status is one of want (failing the test
// after a while), and returns it.
func await(t *testing.T, c openai.Client, id string, want ...openai.BatchStatus) *openai.Batch {
	t.Helper()
	var b *openai.Batch
	require.Eventually(t, func() bool {
		var err error
		b, err = c.Batches.Get(context.Background(), id)
		require.NoError(t, err)
		for _, s := range want {
			if b.Status == s {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "batch %s never reached %v", id, want)
	return b
}

// outLine is a line of an output or error file.
type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// download reads file id's lines, keyed by custom_id; a custom_id seen
// twice fails the test.
func download(t *testing.T, c openai.Client, id string) map[string]outLine {
	t.Helper()
	if id == "" {
		return nil
	}
	res, err := c.Files.Content(context.Background(), id)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := map[string]outLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l outLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		require.NotContains(t, out, l.CustomID, "custom_id %s answered twice", l.CustomID)
		require.True(t, strings.HasPrefix(l.ID, "batch_req_"), l.ID)
		out[l.CustomID] = l
	}
	require.NoError(t, sc.Err())
	return out
}

// apiError asserts err is the OpenAI error status/code and returns its
// message.
func apiError(t *testing.T, err error, status int, code string) string {
	t.Helper()
	var ae *openai.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, status, ae.StatusCode, ae.RawJSON())
	require.Equal(t, code, ae.Code, ae.RawJSON())
	return ae.Message
}

// counter sums the counter name over the series whose labels hold every
// pair of labels (name, value, ...).
func (f *fixture) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
