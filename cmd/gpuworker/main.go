package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// shutdownTimeout bounds how long in-flight responses get to finish.
const shutdownTimeout = 10 * time.Second

// Exit codes, as cmd/sluice's: a wrong command line exits 2, a run that
// fails (a file that cannot be read, a port that cannot be bound) exits 1.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
}

// config holds the parsed flags.
type config struct {
	listen       string
	host         string // parsed --listen
	port         int    // parsed --listen
	count        int
	opts         gpuworker.Options
	listProfiles bool
	profilesFile string
}

// parseFlags parses the command line and checks the values that need no
// file: every error it returns is a usage error.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("gpuworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9001", "address of the first worker; others take the following ports")
	fs.IntVar(&c.count, "count", 1, "number of workers")
	fs.StringVar(&c.opts.Model, "model", "", "served model name (required)")
	fs.StringVar(&c.opts.Profile, "profile", gpuworker.InstantProfile, "GPU x model profile, see --list-profiles")
	fs.Float64Var(&c.opts.Speedup, "speedup", 1, "run simulated time this many times faster than the wall clock (a positive number; below 1 runs slower)")
	fs.Int64Var(&c.opts.Seed, "seed", 0, "seed for output lengths and texts")
	fs.BoolVar(&c.listProfiles, "list-profiles", false, "print the profiles (built-in and --profiles) and exit")
	fs.StringVar(&c.profilesFile, "profiles", "", "YAML file of extra profiles, usable with --profile")
	fs.IntVar(&c.opts.StoreResponses, "store-responses", 0, "keep the newest this many Responses API responses, for previous_response_id and GET/DELETE /v1/responses/{id} (0: none, as vLLM by default)")
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
	if c.listProfiles {
		return c, nil
	}
	var errs []error
	if c.opts.Model == "" {
		errs = append(errs, errors.New("--model is required"))
	}
	if c.count < 1 {
		errs = append(errs, fmt.Errorf("--count must be at least 1, got %d", c.count))
	}
	// Options.Speedup takes 0 for 1, but "0 times faster" on the command
	// line is a mistake, not a request for the default.
	if !(c.opts.Speedup > 0) || math.IsInf(c.opts.Speedup, 0) {
		errs = append(errs, fmt.Errorf("--speedup must be a positive number, got %v", c.opts.Speedup))
	}
	host, portText, err := net.SplitHostPort(c.listen)
	if err == nil {
		c.host = host
		c.port, err = strconv.Atoi(portText)
		if err == nil && (c.port < 0 || c.port > 65535 || c.port > 0 && c.port+c.count-1 > 65535) {
			err = fmt.Errorf("ports %d to %d (--count %d) are not all in 0..65535", c.port, c.port+max(c.count, 1)-1, c.count)
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", c.listen, err))
	}
	if err := c.opts.Faults.Validate(); err != nil {
		errs = append(errs, faultFlagErrors(err))
	}
	return c, errors.Join(errs...)
}

// faultFlagErrors names each bad fault in err by its flag (--error-rate)
// rather than by the JSON field of /admin/faults (error_rate).
func faultFlagErrors(err error) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = slices.Clone(joined.Unwrap())
	}
	for i, e := range errs {
		var fe *gpuworker.FaultError
		if errors.As(e, &fe) {
			errs[i] = fmt.Errorf("--%s %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Reason)
		}
	}
	return errors.Join(errs...)
}

// loadProfiles returns the built-in profiles plus those of the --profiles
// file, if any.
func loadProfiles(path string) (gpuworker.ProfileSet, error) {
	if path == "" {
		return gpuworker.NewProfileSet(nil), nil
	}
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

// resolve sets the profile --profile names and checks the options every
// worker is built with; its errors are usage errors. gpuworker.New starts
// nothing and holds nothing to release, so building one worker here checks
// every option (--dialect among them) before any port is bound.
func (c *config) resolve(profiles gpuworker.ProfileSet) error {
	prof, err := profiles.Lookup(c.opts.Profile)
	if errors.Is(err, gpuworker.ErrUnknownProfile) {
		return fmt.Errorf("--profile %q: unknown profile; --list-profiles prints them", c.opts.Profile)
	}
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	c.opts.CustomProfile = &prof
	_, err = gpuworker.New(c.opts)
	if errors.Is(err, gpuworker.ErrUnknownDialect) {
		return fmt.Errorf("--dialect %q: want %s, %s or %s", c.opts.Dialect, gpuworker.DialectVLLM, gpuworker.DialectSGLang, gpuworker.DialectTGI)
	}
	return err
}

// printError prints err, one line per joined error, each with the
// command's prefix. Package gpuworker's errors carry the same prefix, so it
// is dropped from them rather than doubled.
func printError(w io.Writer, err error) {
	for line := range strings.Lines(err.Error()) {
		fmt.Fprintln(w, "gpuworker:", strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "gpuworker: "))
	}
}

// serve runs the command until ctx is done. ready, if not nil, receives the
// listening addresses once every worker accepts connections.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func([]string)) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		printError(stderr, err)
		return exitUsage
	}
	profiles, err := loadProfiles(cfg.profilesFile)
	if err != nil {
		printError(stderr, err)
		return exitError
	}
	if cfg.listProfiles {
		if err := listProfiles(stdout, profiles); err != nil {
			printError(stderr, err)
			return exitError
		}
		return exitOK
	}
	if err := cfg.resolve(profiles); err != nil {
		printError(stderr, err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := runWorkers(ctx, cfg, log, ready); err != nil {
		log.Error("gpuworker failed", "err", err)
		return exitError
	}
	return exitOK
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
	host, port := cfg.host, cfg.port
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
