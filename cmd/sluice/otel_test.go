package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTracesReachAnOTLPCollector sets OTEL_EXPORTER_OTLP_ENDPOINT to a
// loopback collector and checks that serving a request exports spans there
// by the time the server has shut down.
func TestTracesReachAnOTLPCollector(t *testing.T) {
	var exports atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				exports.Add(1)
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	wsrv := startWorker(t, "a")
	path := writeConfig(t, "listen: 127.0.0.1:0\nmodels:\n  - name: a\n    backends:\n      - url: "+wsrv.URL+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: 5 * time.Second, ready: ready,
			log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	addr := <-ready
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"a","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	cancel()
	require.NoError(t, <-done)
	assert.Positive(t, exports.Load(), "shutdown flushed the spans to the collector")
}

// otelVars are the variables the tracing tests set; each test clears them
// all first, so that the environment it runs in cannot leak in.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"}

func setOtelEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, env[k])
	}
}

func TestTracingResourceNamesTheService(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default", nil, "sluice"},
		{"OTEL_SERVICE_NAME", map[string]string{"OTEL_SERVICE_NAME": "edge-router"}, "edge-router"},
		{"OTEL_RESOURCE_ATTRIBUTES", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment=prod"}, "from-attrs"},
		{"OTEL_SERVICE_NAME wins", map[string]string{"OTEL_SERVICE_NAME": "edge-router", "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs"}, "edge-router"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOtelEnv(t, tt.env)
			res, err := newResource(context.Background())
			require.NoError(t, err)
			name, ok := res.Set().Value("service.name")
			require.True(t, ok)
			assert.Equal(t, tt.want, name.AsString())
			_, ok = res.Set().Value("telemetry.sdk.language")
			assert.True(t, ok, "the SDK describes itself")
		})
	}
	setOtelEnv(t, map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"})
	res, err := newResource(context.Background())
	require.NoError(t, err)
	env, _ := res.Set().Value("deployment.environment")
	assert.Equal(t, "prod", env.AsString(), "other resource attributes are kept")
}

// TestTracingHonoursTheSampler checks that the SDK reads
// OTEL_TRACES_SAMPLER (and its argument) itself: nothing in Sluice does.
func TestTracingHonoursTheSampler(t *testing.T) {
	tests := []struct {
		name      string
		sampler   string
		arg       string
		recording bool
	}{
		{"default: parentbased_always_on", "", "", true},
		{"always_off", "always_off", "", false},
		{"traceidratio 0", "traceidratio", "0", false},
		{"parentbased_traceidratio 1", "parentbased_traceidratio", "1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOtelEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
				"OTEL_TRACES_SAMPLER": tt.sampler, "OTEL_TRACES_SAMPLER_ARG": tt.arg})
			tp, shutdown, err := setupTracing(context.Background())
			require.NoError(t, err)
			_, span := tp.Tracer("test").Start(context.Background(), "s")
			assert.Equal(t, tt.recording, span.IsRecording())
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = shutdown(ctx) // nothing listens: the flush of a sampled span fails
		})
	}
}

func TestTracingOff(t *testing.T) {
	endpoint := "http://127.0.0.1:1"
	tests := []struct {
		name string
		env  map[string]string
		off  bool
	}{
		{"no endpoint", nil, true},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "TRUE"}, true},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none"}, true},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOtelEnv(t, tt.env)
			tp, shutdown, err := setupTracing(context.Background())
			require.NoError(t, err)
			defer func() { assert.NoError(t, shutdown(context.Background())) }()
			_, isNoop := tp.(noop.TracerProvider)
			assert.Equal(t, tt.off, isNoop)
		})
	}
}

// TestTracingRefusesWhatItCannotExport: an exporter or protocol Sluice
// does not build is a startup error, not spans silently lost.
func TestTracingRefusesWhatItCannotExport(t *testing.T) {
	endpoint := "http://127.0.0.1:1"
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"zipkin", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP protocol grpc"},
		{"http/json", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTLP protocol http/json"},
		{"a sampler the SDK does not know", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "bogus"}, "OTEL_TRACES_SAMPLER=bogus"},
		{"a ratio above 1", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "5"}, "OTEL_TRACES_SAMPLER_ARG=5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOtelEnv(t, tt.env)
			_, _, err := setupTracing(context.Background())
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// TestTraceErrorsJoinTheJSONLogSpaced: the SDK's errors (a collector
// down) become JSON log lines, one per traceErrorEvery with the count left
// out, instead of plain-text lines several a second.
func TestTraceErrorsJoinTheJSONLogSpaced(t *testing.T) {
	var out syncBuffer
	h := &traceErrors{log: slog.New(slog.NewJSONHandler(&out, nil))}
	for range 5 {
		h.Handle(errors.New("traces export: connection refused"))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Equal(t, "tracing error", first["msg"])
	assert.Equal(t, "traces export: connection refused", first["err"])

	h.mu.Lock()
	h.last = h.last.Add(-traceErrorEvery)
	h.mu.Unlock()
	h.Handle(errors.New("again"))
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], `"errors_since_last_line":4`)
}
