package router

import (
	"cmp"
	"errors"
	"log/slog"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/middleware"
	"github.com/sluice-llm/sluice/router/proxy"
	"github.com/sluice-llm/sluice/router/respindex"
)

// Route is one served model: its backend pool and the policy that picks
// from it.
type Route struct {
	Pool   *backends.Pool
	Picker policies.Picker
	// Gate, when set, is the route's admission queue: requests wait there
	// while every backend is at its budget and are bound late, through
	// the gate (which picks with the same Picker).
	Gate *admission.Gate
	// Fallbacks name other routes of the table, in order, that take this
	// route's requests while none of its endpoints is in routing.
	Fallbacks []string
	// Policy is the Picker's config name, recorded on pick spans. Default:
	// the Picker's Go type.
	Policy string
	// FirstByteTimeout bounds each attempt's wait for its backend's
	// response headers (for a whole answer, the answer); past it the
	// attempt is a timeout and another backend may be tried. Zero: the
	// transport's own limit only.
	FirstByteTimeout time.Duration
	// TotalTimeout bounds a request from its arrival to the end of its
	// answer, admission wait included: 504 before the answer starts, an
	// error event ending a stream after. Zero: no limit.
	TotalTimeout time.Duration
	// Aliases are other names clients may send for the route's model; a
	// request naming one is served as the model.
	Aliases []string
	// ServedNames holds, for the pool's endpoints that serve the model
	// under another name (vLLM's --served-model-name), that name: a
	// request reaches them with "model" rewritten to it. Nil or missing:
	// the pool's model name.
	ServedNames map[*backends.Endpoint]string
}

// servedName is the name ep serves the route's model under.
func (r *Route) servedName(ep *backends.Endpoint) string {
	if n := r.ServedNames[ep]; n != "" {
		return n
	}
	return r.Pool.Model()
}

// Table is an immutable routing table: model name to route. A reload builds
// a new Table and swaps it in whole.
type Table struct {
	routes map[string]*Route // by model name and alias
	order  []string          // model names
	names  []string          // model names, each followed by its aliases: what /v1/models lists
}

// NewTable builds a table from routes, keyed by their pools' model names, in
// the order given (the order /v1/models lists them).
func NewTable(routes []*Route) (*Table, error) {
	t := &Table{routes: make(map[string]*Route, len(routes))}
	for _, r := range routes {
		if r == nil || r.Pool == nil || r.Picker == nil {
			return nil, errors.New("router: route needs a pool and a picker")
		}
		m := r.Pool.Model()
		if _, dup := t.routes[m]; dup {
			return nil, errors.New("router: model " + m + " routed twice")
		}
		t.routes[m] = r
		t.order = append(t.order, m)
	}
	for _, r := range routes {
		t.names = append(t.names, r.Pool.Model())
		for _, a := range r.Aliases {
			if _, dup := t.routes[a]; dup || a == "" {
				return nil, errors.New("router: alias " + strconv.Quote(a) + " of model " + r.Pool.Model() + " is empty or names another route")
			}
			t.routes[a] = r
			t.names = append(t.names, a)
		}
	}
	for _, r := range routes {
		for _, fb := range r.Fallbacks {
			if t.routes[fb] == nil {
				return nil, errors.New("router: model " + r.Pool.Model() + " falls back to " + fb + ", which is not routed")
			}
		}
	}
	return t, nil
}

// Options configures a Router. Zero fields mean the documented defaults.
type Options struct {
	// Table is the initial routing table. Required.
	Table *Table
	// MaxBodyBytes caps a request body (413 beyond). Default 10 MiB.
	MaxBodyBytes int64
	// MetricsToken, when set, is asked of /metrics callers as
	// "Authorization: Bearer TOKEN" (the page names tenants, tiers and
	// backends). Empty: /metrics is open.
	MetricsToken string
	// MaxBodyBytesInFlight caps the inference request bodies held at once,
	// counted as they arrive: a request whose body would pass it is
	// answered 503 server_overloaded and its connection closed. Default the
	// larger of 256 MiB and 4 × MaxBodyBytes; never below MaxBodyBytes.
	MaxBodyBytesInFlight int64
	// Retries is how many other endpoints are tried after one that could not
	// be reached. Zero means none.
	Retries int
	// Cooldown is how long an unreachable endpoint is held out. Default 2s.
	Cooldown time.Duration
	// Transport carries upstream requests. Default: proxy.NewTransport with
	// its defaults.
	Transport http.RoundTripper
	// Logger for errors and transitions. Default slog.Default().
	Logger *slog.Logger
	// RequestLog, when set, gets one Info line per inference request
	// (message "request": request_id, route, tenant, model, class,
	// backend, status, input_tokens, output_tokens, latency_ms, ttft_ms
	// for a stream, error for a failure, response_id for a Responses API
	// answer). Default: none.
	RequestLog *slog.Logger
	// Metrics is where the router registers its collectors, served on
	// /metrics. Default: a new private registry.
	Metrics *prometheus.Registry
	// Endpoints, when set, holds every backend the tables were built
	// from: one a reload removed keeps its in-flight series in the
	// metrics until its requests end. Default: the table's backends only.
	Endpoints *backends.Registry
	// TracerProvider for request spans. Default: no-op.
	TracerProvider trace.TracerProvider
	// SessionHeader names the request header whose value identifies a
	// conversation for session affinity (policies.Request.SessionKey); when
	// it is absent the OpenAI "user" field is used. Default "X-Session-Id".
	SessionHeader string
	// Tenants are the configured tenants and their keys. Nil or empty
	// means open: no key is asked for and no limit applies.
	Tenants *auth.Directory
	// Limiter enforces the tenants' limits. Required when Tenants has
	// tenants.
	Limiter *quota.Limiter
	// StreamIdleTimeout ends a stream whose backend sends nothing for this
	// long (noticed within a quarter of it more), with an error event to
	// the client. Default 60s.
	StreamIdleTimeout time.Duration
	// BodyReadTimeout bounds reading a request body: a client that sends
	// it slower loses the request (408) and its connection. Default 30s.
	BodyReadTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Batch, when set, serves OpenAI's Files and Batch APIs (/v1/files,
	// /v1/batches and the paths under them). The router authenticates
	// each request first and passes the tenant in its context
	// (auth.TenantFrom). Default: not served (404).
	Batch http.Handler
	// Responses remembers which backend stored each Responses API response
	// (see stored.go): shared by the replicas when it is in Redis. Default:
	// an in-process index (respindex.NewMemory with its defaults).
	Responses respindex.Index
}

// DefaultSessionHeader is the default Options.SessionHeader.
const DefaultSessionHeader = "X-Session-Id"

// Router serves the OpenAI API in front of the backend pools.
type Router struct {
	table   atomic.Pointer[Table]
	tenants atomic.Pointer[auth.Directory]
	closing atomic.Bool // EndStreams was called
	limiter *quota.Limiter
	// retryBudget bounds retries to a fifth of recent requests (10 to
	// start with, 100 banked at most).
	retryBudget *retryBudget
	bodyWait    time.Duration
	maxBody     int64
	// metricsToken is Options.MetricsToken.
	metricsToken string
	bodies       *bodyBudget
	retries      int
	cooldown     time.Duration
	proxy        *proxy.Proxy
	log          *slog.Logger
	requestLog   *slog.Logger
	metrics      *metrics
	registry     *prometheus.Registry
	endpoints    *backends.Registry // nil: none beyond the table's
	tracer       trace.TracerProvider
	attempts     trace.Tracer
	now          func() time.Time
	relayClock   func() time.Time // the clock of measure.Writer (per relayed write): Options.Now when set
	created      int64
	batch        http.Handler
	responses    respindex.Index

	sessionHeader string // canonical form
}

// New validates o and returns a Router.
func New(o Options) (*Router, error) {
	if o.Table == nil {
		return nil, errors.New("router: nil Table")
	}
	if o.MaxBodyBytes < 0 || o.Retries < 0 || o.Cooldown < 0 {
		return nil, errors.New("router: MaxBodyBytes, Retries and Cooldown must not be negative")
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 10 << 20
	}
	if o.MaxBodyBytesInFlight <= 0 {
		o.MaxBodyBytesInFlight = max(256<<20, 4*o.MaxBodyBytes)
	}
	if o.MaxBodyBytesInFlight < o.MaxBodyBytes {
		o.MaxBodyBytesInFlight = o.MaxBodyBytes
	}
	if o.Cooldown == 0 {
		o.Cooldown = 2 * time.Second
	}
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = 60 * time.Second
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = 30 * time.Second
	}
	if o.Transport == nil {
		o.Transport = proxy.NewTransport(proxy.TransportOptions{})
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = prometheus.NewRegistry()
	}
	var relayClock func() time.Time // nil: measure.Writer's own, which reads only the monotonic clock
	if o.Now == nil {
		o.Now = time.Now
	} else {
		relayClock = o.Now
	}
	if o.Responses == nil {
		o.Responses = respindex.NewMemory(0, 0, o.Now)
	}
	if o.SessionHeader == "" {
		o.SessionHeader = DefaultSessionHeader
	}
	if !validHeaderName(o.SessionHeader) {
		return nil, errors.New("router: SessionHeader " + strconv.Quote(o.SessionHeader) + " is not a valid header name")
	}
	if !o.Tenants.Open() && o.Limiter == nil {
		return nil, errors.New("router: tenants need a Limiter")
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	}
	px, err := proxy.New(proxy.Options{Transport: o.Transport, Logger: o.Logger, Inject: injectTraceContext,
		StreamIdleTimeout: o.StreamIdleTimeout})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Metrics)
	if err != nil {
		return nil, err
	}
	rt := &Router{
		maxBody:      o.MaxBodyBytes,
		metricsToken: o.MetricsToken,
		bodies:       newBodyBudget(o.MaxBodyBytesInFlight, o.MaxBodyBytes),
		retries:      o.Retries,
		cooldown:     o.Cooldown,
		proxy:        px,
		log:          o.Logger,
		requestLog:   o.RequestLog,
		metrics:      m,
		registry:     o.Metrics,
		endpoints:    o.Endpoints,
		tracer:       o.TracerProvider,
		attempts:     o.TracerProvider.Tracer("github.com/sluice-llm/sluice/router"),
		now:          o.Now,
		relayClock:   relayClock,
		created:      o.Now().Unix(),
		limiter:      o.Limiter,
		retryBudget:  newRetryBudget(0.2, 10, 100),
		bodyWait:     o.BodyReadTimeout,
		batch:        o.Batch,
		responses:    o.Responses,

		sessionHeader: textproto.CanonicalMIMEHeaderKey(o.SessionHeader),
	}
	rt.table.Store(o.Table)
	if err := o.Metrics.Register(newFleetCollector(rt)); err != nil {
		return nil, err
	}
	rt.tenants.Store(o.Tenants)
	return rt, nil
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 §5.1).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// SetTable swaps in a new routing table; requests in flight finish on the
// table they started with.
func (rt *Router) SetTable(t *Table) {
	if t != nil {
		rt.table.Store(t)
	}
}

// allowed is the Allow header for a path that exists under other methods.
func allowed(path string) string {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses":
		return "POST"
	}
	if rest, ok := strings.CutPrefix(path, "/v1/responses/"); ok { // a stored response's
		switch {
		case strings.HasSuffix(rest, "/cancel"):
			return "POST"
		case !strings.Contains(rest, "/"):
			return "GET, HEAD, DELETE"
		}
	}
	return "GET, HEAD"
}

// EndStreams ends every stream still open with an error event telling its
// client the server is shutting down (call it when the drain time is up,
// before closing the server). From then on a request admission binds is
// refused (503 server_shutting_down) rather than started: the slots the
// ended streams free would otherwise start requests waiting in the queue,
// which the server then cut without a word as it closed. A request whose
// context then ends (the server's base context, cancelled next) is
// answered 503 server_shutting_down too, not taken for a client gone.
func (rt *Router) EndStreams() {
	rt.closing.Store(true)
	rt.proxy.Abort(proxy.ErrShuttingDown)
}

// SetTenants swaps in a new tenant directory (nil or empty: open). It
// returns an error, keeping the old one, when the router has no Limiter
// for a directory with tenants.
func (rt *Router) SetTenants(d *auth.Directory) error {
	if !d.Open() && rt.limiter == nil {
		return errors.New("router: tenants need a Limiter")
	}
	rt.tenants.Store(d)
	return nil
}

// Handler returns the HTTP handler with every route and middleware.
func (rt *Router) Handler() http.Handler {
	r := chi.NewRouter()
	// chimw.GetHead: a HEAD request is served by its route's GET handler
	// (the server sends the headers and drops the body), as the 405's Allow
	// promises; health checks and load balancers probe with HEAD.
	r.Use(chimw.GetHead, middleware.RequestID, middleware.Recoverer(rt.log),
		middleware.Tracing(middleware.TracingOptions{Provider: rt.tracer, Untraced: []string{"/healthz", "/readyz", "/metrics"}}))
	r.NotFound(rt.counted("unmatched", func(w http.ResponseWriter, r *http.Request) { writeError(w, noRoute(r)) }))
	r.MethodNotAllowed(rt.counted("unmatched", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", allowed(req.URL.Path))
		writeError(w, &APIError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
			Code: "method_not_allowed", Message: "method not allowed on this route"})
	}))
	r.Get("/healthz", rt.healthz)
	r.Get("/readyz", rt.readyz)
	r.Method(http.MethodGet, "/metrics", tokenOnly(rt.metricsToken, promhttp.HandlerFor(rt.registry, promhttp.HandlerOpts{})))
	// The /v1 routes sit on the top router rather than a mounted
	// subrouter: a mount's wildcard path value costs every request four
	// allocations (set by chi, then cloned into the upstream request).
	r.Get("/v1/models", rt.counted("/v1/models", rt.listModels))
	r.Get("/v1/models/*", rt.counted("/v1/models/{model}", rt.getModel)) // model names may hold slashes (meta-llama/Meta-Llama-3-8B-Instruct)
	r.Post("/v1/chat/completions", rt.inference)
	r.Post("/v1/completions", rt.inference)
	r.Post("/v1/embeddings", rt.inference)
	r.Post("/v1/responses", rt.inference)
	// A stored response lives on the backend that made it (stored.go).
	r.Get("/v1/responses/{id}", rt.counted("/v1/responses/{id}", rt.storedResponse))
	r.Delete("/v1/responses/{id}", rt.counted("/v1/responses/{id}", rt.storedResponse))
	r.Post("/v1/responses/{id}/cancel", rt.counted("/v1/responses/{id}/cancel", rt.storedResponse))
	r.Get("/v1/responses/{id}/input_items", rt.counted("/v1/responses/{id}/input_items", rt.storedResponse))
	if rt.batch != nil {
		for _, p := range []string{"/v1/files", "/v1/files/*", "/v1/batches", "/v1/batches/*"} {
			r.HandleFunc(p, rt.batchAPI)
		}
	}
	return r
}

// counted serves h and counts each request in the request metrics under
// route, a fixed label (a client's path never is one), with model and
// class "none": the model list, a path no route serves, a method a route
// does not take (a client with a wrong base URL, or guessing keys at
// /v1/models, was invisible in the metrics).
func (rt *Router) counted(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := requestRecord{start: rt.now()}
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		rt.metrics.observe(route, cmp.Or(sw.status, http.StatusOK), rt.now().Sub(rec.start), &rec)
	}
}

// batchAPI serves the Files and Batch APIs (rt.batch) to a request with a
// valid key (any request, without tenants), passing its tenant on in the
// context, and counts the call in the request metrics under its route's
// pattern (apiRoute), with model and class "none".
func (rt *Router) batchAPI(w http.ResponseWriter, r *http.Request) {
	rec := requestRecord{start: rt.now()}
	sw := &statusWriter{ResponseWriter: w}
	route := apiRoute(r.URL.Path)
	// Deferred: a download the client leaves ends the handler with a
	// panic (http.ErrAbortHandler), and it is counted all the same.
	defer func() {
		rt.metrics.observe(route, cmp.Or(sw.status, http.StatusOK), rt.now().Sub(rec.start), &rec)
	}()
	t, err := rt.tenants.Load().Authenticate(r)
	if err != nil {
		writeError(sw, errorFor(err))
		return
	}
	rec.tenant = t
	if t != nil {
		r = r.WithContext(auth.WithTenant(r.Context(), t))
		if r.Method == http.MethodPost && rt.limiter != nil && route != "/v1/batches/{id}/cancel" {
			// An upload or a batch created: one request against the
			// tenant's request rate (uploads were unlimited: 1,000 in 2 s
			// from a key with a burst of 100), and an upload against its
			// concurrency too (thousands were held open at once). A cancel
			// is not limited, as reads are not: it is how a tenant stops a
			// batch that uses its limits up (it was refused 429 while the
			// batch's lines held every slot).
			lim := t.Limits
			if route != "/v1/files" {
				lim.Concurrency = 0
			}
			res, err := rt.limiter.Reserve(r.Context(), t.Name, lim, quota.Amount{Requests: 1})
			if err != nil {
				var re *quota.RejectError
				if errors.As(err, &re) {
					setRateHeaders(sw.Header(), re.Decision)
				}
				writeError(sw, errorFor(err))
				return
			}
			defer rt.limiter.Settle(res, quota.Amount{Requests: 1})
		}
	}
	rt.batch.ServeHTTP(sw, r)
}

// apiRoute is the route pattern of a Files or Batch API path, for a
// metric label: the IDs in it are the clients', so never label values.
func apiRoute(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/") // v1, files|batches[, id[, content|cancel]]
	if len(parts) < 2 {
		return "/v1/other"
	}
	base := "/v1/" + parts[1]
	if parts[1] != "files" && parts[1] != "batches" {
		return "/v1/other"
	}
	switch len(parts) {
	case 2:
		return base
	case 3:
		return base + "/{id}"
	case 4:
		if parts[3] == "content" || parts[3] == "cancel" {
			return base + "/{id}/" + parts[3]
		}
	}
	return base + "/other"
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	// onOK, when set, is called once, when a 2xx status is written,
	// before it is relayed.
	onOK func()
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if w.onOK != nil && code/100 == 2 {
		ok := w.onOK
		w.onOK = nil
		ok()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
