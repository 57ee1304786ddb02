package main

import (
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
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// shutdownTimeout bounds how long in-flight responses get to finish.
const shutdownTimeout = 10 * time.Second

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
}

// config holds the parsed flags.
type config struct {
	listen       string
	count        int
	opts         gpuworker.Options
	listProfiles bool
	profilesFile string
	profiles     gpuworker.ProfileSet
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("gpuworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9001", "address of the first worker; others take the following ports")
	fs.IntVar(&c.count, "count", 1, "number of workers")
	fs.StringVar(&c.opts.Model, "model", "", "served model name (required)")
	fs.StringVar(&c.opts.Profile, "profile", gpuworker.InstantProfile, "GPU x model profile, see --list-profiles")
	fs.Float64Var(&c.opts.Speedup, "speedup", 1, "run simulated time this many times faster than the wall clock")
	fs.Int64Var(&c.opts.Seed, "seed", 0, "seed for output lengths and texts")
	fs.BoolVar(&c.listProfiles, "list-profiles", false, "print the profiles (built-in and --profiles) and exit")
	fs.StringVar(&c.profilesFile, "profiles", "", "YAML file of extra profiles, usable with --profile")
	fs.StringVar(&c.opts.Dialect, "dialect", gpuworker.DialectVLLM, "metric names on /metrics: vllm, sglang or tgi")
	fs.Float64Var(&c.opts.Faults.ErrorRate, "error-rate", 0, "fraction of generation requests answered with --error-status at once")
	fs.IntVar(&c.opts.Faults.ErrorStatus, "error-status", 500, "HTTP status of injected errors (500..599)")
	fs.DurationVar(&c.opts.Faults.AddedLatency, "added-latency", 0, "wall-clock delay before every generation response starts")
	fs.IntVar(&c.opts.Faults.StallAfter, "stall-after", 0, "hang every generation after this many tokens (0: never)")
	fs.IntVar(&c.opts.Faults.CrashAfter, "crash-after", 0, "close a worker's server abruptly after this many /v1 requests (0: never)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.profiles = gpuworker.NewProfileSet(nil)
	if c.profilesFile != "" {
		set, err := loadProfiles(c.profilesFile)
		if err != nil {
			return c, err
		}
		c.profiles = set
	}
	if c.listProfiles {
		return c, nil
	}
	prof, err := c.profiles.Lookup(c.opts.Profile)
	if err != nil {
		return c, fmt.Errorf("--profile: %w", err)
	}
	c.opts.CustomProfile = &prof
	if err := c.opts.Faults.Validate(); err != nil {
		return c, err
	}
	if c.count < 1 {
		return c, fmt.Errorf("--count must be at least 1, got %d", c.count)
	}
	if c.opts.Model == "" {
		return c, errors.New("--model is required")
	}
	return c, nil
}

// loadProfiles reads a --profiles file.
func loadProfiles(path string) (gpuworker.ProfileSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return gpuworker.ProfileSet{}, fmt.Errorf("--profiles: %w", err)
	}
	defer func() { _ = f.Close() }()
	set, err := gpuworker.LoadProfileSet(f)
	if err != nil {
		return gpuworker.ProfileSet{}, fmt.Errorf("--profiles %s: %w", path, err)
	}
	return set, nil
}

// serve runs the command until ctx is done. ready, if not nil, receives the
// listening addresses once every worker accepts connections.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func([]string)) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpuworker:", err)
		return 2
	}
	if cfg.listProfiles {
		if err := listProfiles(stdout, cfg.profiles); err != nil {
			fmt.Fprintln(stderr, "gpuworker:", err)
			return 1
		}
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := runWorkers(ctx, cfg, log, ready); err != nil {
		log.Error("gpuworker failed", "err", err)
		return 1
	}
	return 0
}

// listProfiles prints each profile with its derived capacity and speed.
func listProfiles(out io.Writer, set gpuworker.ProfileSet) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tGPU\tMODEL\tKV TOKENS\tKV BLOCKS\tDECODE TOK/S (1 STREAM)\tMAX SEQS\tMAX BATCHED TOKENS")
	for _, p := range set.All() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.1f\t%d\t%d\n", p.Name, p.GPU, p.Model,
			p.KVTokens(), p.KVBlocks(), p.DecodeCeiling(), p.MaxNumSeqs, p.MaxBatchedTokens)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write profiles: %w", err)
	}
	return nil
}

// runWorkers listens on consecutive ports, serves until ctx is done, then
// shuts every server down and waits for every Run loop.
func runWorkers(ctx context.Context, cfg config, log *slog.Logger, ready func([]string)) error {
	host, portText, err := net.SplitHostPort(cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", cfg.listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("--listen %q: bad port: %w", cfg.listen, err)
	}

	var (
		workers   []*gpuworker.Worker
		listeners []net.Listener
		servers   = make([]*http.Server, cfg.count)
		crashed   = make([]atomic.Bool, cfg.count)
	)
	closeAll := func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}
	for i := range cfg.count {
		opts := cfg.opts
		// A crash (--crash-after) closes the worker's server abruptly: its
		// listener and every open connection, like a killed process.
		opts.OnCrash = func() {
			if crashed[i].CompareAndSwap(false, true) {
				log.Warn("worker crashed (injected fault)", "worker", i)
				_ = servers[i].Close()
			}
		}
		w, err := gpuworker.New(opts)
		if err != nil {
			closeAll()
			return fmt.Errorf("worker %d: %w", i, err)
		}
		p := port
		if port != 0 {
			p = port + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			closeAll()
			return fmt.Errorf("worker %d: %w", i, err)
		}
		workers = append(workers, w)
		listeners = append(listeners, ln)
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	var wg sync.WaitGroup
	errs := make(chan error, len(workers))
	addrs := make([]string, len(workers))
	for i, w := range workers {
		srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second}
		servers[i] = srv
		addrs[i] = listeners[i].Addr().String()
		wg.Go(func() { _ = w.Run(runCtx) })
		wg.Go(func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serve %s: %w", addrs[i], err)
			}
		})
		p := w.Profile()
		log.Info("worker listening", "addr", "http://"+addrs[i], "model", w.Model(), "profile", p.Name,
			"speedup", cfg.opts.Speedup, "kv_tokens", p.KVTokens(), "dialect", cfg.opts.Dialect)
	}
	if ready != nil {
		ready(addrs)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	log.Info("shutting down", "workers", len(workers))
	// Stopping the engines first ends streams still in flight, so Shutdown
	// does not wait on them.
	cancelRun()
	shutCtx, cancelShut := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancelShut()
	var shutErrs []error
	for i, srv := range servers {
		if err := srv.Shutdown(shutCtx); err != nil && !crashed[i].Load() {
			shutErrs = append(shutErrs, fmt.Errorf("shutdown %s: %w", addrs[i], err))
		}
	}
	wg.Wait()
	return errors.Join(append(shutErrs, serveErr)...)
}
