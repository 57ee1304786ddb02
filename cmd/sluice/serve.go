package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/proxy"
)

// serve runs the router until SIGINT or SIGTERM, reloading the config on
// SIGHUP (a bad reload keeps the running config).
func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (required)")
	listen := fs.String("listen", "", "listen address; overrides the config's listen")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	drain := fs.Duration("shutdown-timeout", 30*time.Second, "how long open requests may finish on shutdown")
	watch := fs.Duration("watch", 2*time.Second, "poll the config file this often and reload it when it changes (0 turns it off; SIGHUP always reloads)")
	pprofAddr := fs.String("pprof", "", "serve Go's profiler (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (off by default; no authentication)")
	redisURL := fs.String("redis-url", os.Getenv("SLUICE_REDIS_URL"),
		"Redis for limits shared across replicas; overrides limits.redis_url (default $SLUICE_REDIS_URL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for
		}
		return 2
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first argument that is not a
		// flag: a stray word silently dropped every flag after it.
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice serve: --config is required")
		return 2
	}
	if *drain < 0 || *watch < 0 {
		fmt.Fprintln(stderr, "sluice serve: --shutdown-timeout and --watch must not be negative")
		return 2
	}
	if *redisURL != "" {
		// Checked here as the file's limits.redis_url is (redisClient runs
		// configs.CheckRedisURL, then go-redis's own parse), and named as
		// what set it; the messages redact the URL's passwords.
		if c, err := redisClient(*redisURL, time.Second); err != nil {
			fmt.Fprintf(stderr, "sluice serve: --redis-url (or SLUICE_REDIS_URL): %v\n", err)
			return 2
		} else {
			_ = c.Close()
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "sluice serve: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv}))
	if *pprofAddr != "" {
		stopPprof, err := servePprof(*pprofAddr)
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: --pprof: %v\n", err)
			return 2
		}
		defer stopPprof()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	if err := runServer(ctx, serverOptions{path: *path, listen: *listen, redisURL: *redisURL, drain: *drain, log: log, reload: hup,
		watchEvery: *watch}); err != nil {
		log.Error("sluice stopped", "err", err)
		return 1
	}
	return 0
}

type serverOptions struct {
	path     string
	listen   string
	redisURL string // overrides limits.redis_url when set
	// watchEvery, when positive, polls the config file this often and
	// reloads it when it changes.
	watchEvery time.Duration
	drain      time.Duration
	log        *slog.Logger
	reload     <-chan os.Signal
	// ready, if set, receives the bound address once the server accepts
	// connections (tests use it).
	ready chan<- string
}

// override applies the command line's settings to a config read from the
// file: /admin/config showed the file's listen and redis_url where --listen
// and --redis-url (or SLUICE_REDIS_URL) ran others.
func (o serverOptions) override(c *configs.Config) {
	if o.listen != "" {
		c.Listen = o.listen
	}
	if o.redisURL != "" {
		c.Limits.RedisURL = o.redisURL
	}
}

// runServer builds the router from the config and serves until ctx ends.
func runServer(ctx context.Context, o serverOptions) error {
	// go-redis logs through a logger of its own, process-wide, in plain
	// text on stderr (a line per failed dial while Redis is down); here
	// its lines join the JSON log at debug level: the stores log an
	// outage once, at warn, and count every failure.
	redis.SetLogger(redisLog{o.log})
	watch := newWatcher(o.path, o.watchEvery) // the file as read here
	cfg, err := configs.Load(o.path)
	if err != nil {
		return err
	}
	o.override(cfg)
	// The certificates' files, stamped before they are read, so that a
	// renewal written from here on reloads them.
	watch = watch.and(cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.Admin.TLS.CertFile, cfg.Admin.TLS.KeyFile)
	apiCert, err := newCertificate("tls", cfg.TLS)
	if err != nil {
		return err
	}
	adminCert, err := newCertificate("admin.tls", cfg.Admin.TLS)
	if err != nil {
		return err
	}
	upTLS, err := upstreamTLS(cfg.Upstream.TLS)
	if err != nil {
		return err
	}
	reg, err := newPolicyRegistry()
	if err != nil {
		return err
	}
	eps := backends.NewRegistry()
	metrics := prometheus.NewRegistry()
	if cfg.Upstream.Breaker.On() {
		s, err := breakerSettings(cfg.Upstream.Breaker, o.log, metrics)
		if err != nil {
			return err
		}
		eps.SetBreakers(s)
	}
	if err := metrics.Register(collectors.NewGoCollector()); err != nil {
		return err
	}
	if err := metrics.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	tp, shutdownTracing, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	if _, off := tp.(noop.TracerProvider); !off {
		otel.SetErrorHandler(&traceErrors{log: o.log})
		o.log.Info("tracing on: spans go out as OTLP over HTTP", "endpoint",
			cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")),
			"sampler", cmp.Or(os.Getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on"))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			o.log.Warn("flushing traces", "err", err)
		}
	}()
	tenants, err := buildTenants(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", o.path, err)
	}
	st, err := newLimitStore(cfg, o.redisURL)
	if err != nil {
		return err
	}
	defer func() { _ = st.close() }()
	if st.load != nil {
		// Loading the scripts at start spares the first requests an EVAL;
		// a Redis that is down now is not fatal: limits fail open or
		// closed until it answers, and the scripts load on first use.
		// A Redis that answers and refuses the URL's password or database
		// is a config error, though: no wait brings it back.
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := st.load(lctx)
		cancel()
		if refusal := redisRefusal(err); refusal != "" {
			return fmt.Errorf("limits.redis_url (or --redis-url) %s: Redis refused %s: %w", configs.RedactURL(st.url), refusal, err)
		}
		if err != nil {
			o.log.Warn("limit store not answering at start", "err", err)
		}
	}
	limiter, err := newLimiter(cfg, st, o.log, metrics)
	if err != nil {
		return err
	}
	shared, err := newSharedAdmission(cfg, st, o.log, metrics)
	if err != nil {
		return err
	}
	table, endpoints, err := buildTable(cfg, reg, eps, shared, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", o.path, err)
	}
	if tenants.Open() {
		o.log.Warn("no tenants configured: every caller is served without a key or limits")
	} else {
		where := "in-process (limits hold for this replica alone)"
		if st.redis {
			where = "redis"
		}
		o.log.Info("tenants configured", "tenants", len(tenants.Tenants()), "limit_store", where,
			"fail_open", cfg.Limits.FailsOpen())
	}
	// The limiter settles in the background until every request has ended:
	// it stops after the server has drained.
	lctx, stopLimiter := context.WithCancel(context.Background())
	limited := make(chan error, 1)
	go func() { limited <- limiter.Run(lctx) }()
	var renewing sync.WaitGroup // the admission leases, renewed as long
	if shared != nil {
		renewing.Go(func() { shared.Renew(lctx) })
		renewing.Go(func() { shared.prefilled.Run(lctx) })
	}
	defer func() {
		stopLimiter()
		<-limited
		renewing.Wait()
	}()
	ropts := routerOptions(cfg, table)
	ropts.Tenants = tenants
	ropts.Limiter = limiter
	ropts.Logger = o.log
	if cfg.Log.RequestsOn() {
		ropts.RequestLog = o.log
	}
	ropts.TracerProvider = tp
	ropts.Metrics = metrics
	ropts.Endpoints = eps
	ropts.Transport = proxy.NewTransport(proxy.TransportOptions{
		DialTimeout:           cfg.Upstream.DialTimeout.Std(),
		ResponseHeaderTimeout: -1, // each model's first_byte bounds its attempts (router.Route), so a reload changes it
		MaxIdleConnsPerHost:   cfg.Upstream.MaxIdleConnsPerHost,
		TLS:                   upTLS,
	})
	batches, err := newBatchAPI(cfg, cmp.Or(o.redisURL, cfg.Limits.RedisURL), o.log)
	if err != nil {
		return err
	}
	if batches != nil {
		defer func() { _ = batches.close() }()
		ropts.Batch = batches.svc
	}
	if ropts.Responses, err = newResponseIndex(cfg, st); err != nil {
		return err
	}
	rt, err := router.New(ropts)
	if err != nil {
		return err
	}
	scraper, err := newScraper(cfg, o.log, metrics, upTLS)
	if err != nil {
		return err
	}
	if scraper != nil {
		scraper.SetEndpoints(endpoints)
		sctx, stopScraper := context.WithCancel(ctx)
		scraped := make(chan error, 1)
		go func() { scraped <- scraper.Run(sctx) }()
		defer func() {
			stopScraper()
			if err := <-scraped; err != nil {
				o.log.Warn("load scraper stopped", "err", err)
			}
		}()
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Every request's context derives from base, which ends when the
	// drain time is up: requests still waiting in admission or for a
	// whole answer then get a 503 rather than a connection closed on them.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return base },
		Handler:           withCORS(cfg.CORS, rt.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(o.log.Handler(), slog.LevelWarn),
	}
	stopBatches := func() {}
	if batches != nil {
		// As shutdown starts the runner claims no more lines; those running
		// have the drain to finish (then they are pending again for the
		// next start), beside the requests the server drains.
		stopBatches, err = batches.run(ctx, srv.Handler, metrics, o.drain)
		if err != nil {
			return err
		}
		defer stopBatches()
	}
	for _, m := range cfg.Models {
		o.log.Info("serving model", "model", m.Name, "policy", m.Policy, "backends", len(m.Backends), "admission", admissionSummary(m))
	}
	apiCert.logServed(o.log, time.Now())
	adminCert.logServed(o.log, time.Now())
	o.log.Info("sluice listening", "addr", ln.Addr().String(), "tls", apiCert != nil)
	if o.ready != nil {
		o.ready <- ln.Addr().String()
	}

	if shared != nil {
		actx, stopWatch := context.WithCancel(ctx)
		var watching sync.WaitGroup
		watching.Go(func() { shared.Run(actx, rt) })
		defer func() { stopWatch(); watching.Wait() }()
	}
	live := &runtime{path: o.path, log: o.log, reg: reg, eps: eps, rt: rt, scraper: scraper, shared: shared,
		started: cfg, current: cfg, changes: newChangeMetrics(), override: o.override, apiCert: apiCert, adminCert: adminCert}
	if err := live.changes.register(metrics); err != nil {
		return err
	}
	if stopAdmin, err := serveAdmin(cfg, live, o.log); err != nil {
		return err
	} else if stopAdmin != nil {
		defer stopAdmin()
	}
	fileChanged := make(chan struct{}, 1)
	if o.watchEvery > 0 {
		wctx, stopWatch := context.WithCancel(ctx)
		var watching sync.WaitGroup
		watching.Go(func() { watch.Run(wctx, fileChanged) })
		defer func() { stopWatch(); watching.Wait() }()
	}
	served := make(chan error, 1)
	go func() { served <- apiCert.serve(srv, ln) }()

	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-o.reload:
			_ = live.Reload() // logged; a bad file keeps the running config
		case <-fileChanged:
			o.log.Info("config or certificate file changed; reloading", "path", o.path)
			_ = live.Reload()
		case <-ctx.Done():
			o.log.Info("shutting down", "drain", o.drain.String())
			sctx, cancel := context.WithTimeout(context.Background(), o.drain)
			err := srv.Shutdown(sctx)
			cancel()
			if err != nil {
				// Drain time is up: end the streams still open with an error
				// event (never a silent cut), answer the other requests 503
				// server_shutting_down, and let their handlers return.
				rt.EndStreams()
				endRequests()
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err = srv.Shutdown(sctx)
				cancel()
			}
			stopBatches()
			if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
				return serr
			}
			if err != nil {
				_ = srv.Close()
				return fmt.Errorf("shutdown: %w", err)
			}
			return nil
		}
	}
}
