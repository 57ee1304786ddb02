package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// Options configures a Runner. Zero fields mean the documented defaults.
type Options struct {
	// Target is the base URL of the server, e.g. http://127.0.0.1:8000; a
	// trailing /v1 is accepted. Required.
	Target string
	// Model is sent as the request's model. Required.
	Model string
	// Stream asks for SSE with usage, which measures TTFT and ITL.
	Stream bool
	// APIKey, when set, is sent as a bearer token (a Sluice tenant's key).
	APIKey string
	// APIKeys, when set, holds each request's API key, in workload order,
	// overriding APIKey where not empty: one tenant's key per request.
	APIKeys []string
	// ServiceTiers, when set, holds each request's service_tier (OpenAI's
	// priority, default or flex), in workload order; an empty one omits
	// the field.
	ServiceTiers []string
	// Concurrency caps the requests in flight; a request due while the cap
	// is reached waits for a slot. Zero means no cap.
	Concurrency int
	// Prompter builds prompts. Default: workload.NewPrompter with seed 0.
	Prompter *workload.Prompter
	// RequestTimeout bounds each request. Zero means no bound.
	RequestTimeout time.Duration
	// Client sends the requests. Default: a client on NewTransport, whose
	// idle connections Run closes when it returns.
	Client *http.Client
	// Progress, if set, receives a status line rewritten with \r every
	// ProgressInterval, and a final newline.
	Progress io.Writer
	// ProgressInterval defaults to one second.
	ProgressInterval time.Duration
}

// Runner replays workloads against one target.
type Runner struct {
	opts      Options
	send      sender
	ownClient bool
	auth      map[string]string // Authorization header per key of APIKeys

	sent, done, failed, inFlight atomic.Int64
}

// New validates opts and returns a Runner.
func New(opts Options) (*Runner, error) {
	urls, err := completionsURLs(opts.Target)
	if err != nil {
		return nil, err
	}
	u := urls[0]
	var errs []error
	if strings.TrimSpace(opts.Model) == "" {
		errs = append(errs, errors.New("model is required"))
	}
	if opts.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d must not be negative", opts.Concurrency))
	}
	if opts.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("request timeout %v must not be negative", opts.RequestTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Prompter == nil {
		opts.Prompter = workload.NewPrompter(workload.PromptOptions{})
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	ownClient := opts.Client == nil
	if ownClient {
		opts.Client = &http.Client{Transport: NewTransport(opts.Concurrency)}
	}
	r := &Runner{opts: opts, ownClient: ownClient}
	r.send = sender{client: opts.Client, url: u, urls: urls, model: opts.Model, stream: opts.Stream}
	if opts.APIKey != "" {
		r.send.authorization = "Bearer " + opts.APIKey
	}
	if opts.APIKeys != nil {
		r.auth = make(map[string]string)
		for _, k := range opts.APIKeys {
			if k != "" {
				r.auth[k] = "Bearer " + k
			}
		}
	}
	return r, nil
}

// SessionUser is the OpenAI "user" field Run sends for a request of
// conversation session: "conv-<id>", or empty (the field is omitted) for
// session 0, a request outside any conversation. A router that keys
// affinity on "user" then keeps each conversation on one worker.
func SessionUser(session uint64) string {
	if session == 0 {
		return ""
	}
	return "conv-" + strconv.FormatUint(session, 10)
}

// CheckTarget reports whether target is a usable Options.Target, as New
// would, so a command can reject a bad one before it builds a workload.
func CheckTarget(target string) error {
	_, err := completionsURLs(target)
	return err
}

// completionsURLs checks each of target's comma-separated base URLs and
// returns their /v1/completions URLs.
func completionsURLs(target string) ([]string, error) {
	var urls []string
	for t := range strings.SplitSeq(target, ",") {
		u, err := completionsURL(strings.TrimSpace(t))
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// completionsURL checks target and returns its /v1/completions URL.
func completionsURL(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", target, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("target %q: want an http or https URL with a host", target)
	}
	path := strings.TrimRight(u.Path, "/")
	path = strings.TrimSuffix(path, "/v1")
	u.Path = path + "/v1/completions"
	return u.String(), nil
}

// Result is what Run measured.
type Result struct {
	// Samples holds one sample per request sent, in workload order.
	Samples []report.Sample
	// Elapsed runs from the first send to the end of the last response.
	Elapsed time.Duration
	// Interrupted is true when ctx ended before every request was sent
	// and answered.
	Interrupted bool
}

// Report summarizes the result.
func (res Result) Report() report.Report { return report.Summarize(res.Samples, res.Elapsed) }

// Run sends reqs open-loop, each at its Arrival after Run starts, and
// returns when every sent request has finished or ctx has ended. Runs of
// one Runner must not overlap. APIKeys and ServiceTiers are indexed like
// reqs; a request past their end gets neither.
func (r *Runner) Run(ctx context.Context, reqs []workload.Request) Result {
	if r.ownClient {
		defer r.opts.Client.CloseIdleConnections()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.sent.Store(0)
	r.done.Store(0)
	r.failed.Store(0)
	r.inFlight.Store(0)

	samples := make([]report.Sample, len(reqs))
	var slots chan struct{}
	if r.opts.Concurrency > 0 {
		slots = make(chan struct{}, r.opts.Concurrency)
	}

	start := time.Now()
	stopProgress := r.startProgress(start)
	var wg sync.WaitGroup
	n := r.dispatch(ctx, start, reqs, samples, slots, &wg)
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	return Result{
		Samples:     samples[:n],
		Elapsed:     elapsed,
		Interrupted: ctx.Err() != nil,
	}
}

// dispatch starts one goroutine per request at its arrival time and returns
// how many it started. Request i writes only samples[i].
func (r *Runner) dispatch(ctx context.Context, start time.Time, reqs []workload.Request, samples []report.Sample, slots chan struct{}, wg *sync.WaitGroup) int {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i, req := range reqs {
		if wait := req.Arrival - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return i
			case <-timer.C:
			}
		}
		if slots != nil {
			select {
			case <-ctx.Done():
				return i
			case slots <- struct{}{}:
			}
		}
		if ctx.Err() != nil {
			return i
		}
		r.sent.Add(1)
		r.inFlight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples[i] = r.one(ctx, i, req)
			r.inFlight.Add(-1)
			switch {
			case samples[i].OK:
				r.done.Add(1)
			case !samples[i].Cancelled:
				r.failed.Add(1)
			}
			if slots != nil {
				<-slots
			}
		}()
	}
	return len(reqs)
}

// one builds the prompt of the i-th request and sends it.
func (r *Runner) one(ctx context.Context, i int, req workload.Request) report.Sample {
	if r.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.RequestTimeout)
		defer cancel()
	}
	c := call{prompt: r.opts.Prompter.Tokens(nil, i, req), maxTokens: req.OutputTokens, user: SessionUser(req.Session),
		target: i % len(r.send.urls)}
	if i < len(r.opts.ServiceTiers) {
		c.tier = r.opts.ServiceTiers[i]
	}
	if i < len(r.opts.APIKeys) {
		c.authorization = r.auth[r.opts.APIKeys[i]]
	}
	s := r.send.send(ctx, c)
	if s.Cancelled && ctx.Err() == context.DeadlineExceeded {
		// The per-request timeout fired, not the run's end: that is a failure.
		s.Cancelled = false
		s.Err = fmt.Sprintf("request timed out after %v", r.opts.RequestTimeout)
	}
	return s
}
