package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the router's configuration file.
type Config struct {
	// Listen is the address the OpenAI endpoint listens on. Default "127.0.0.1:8080".
	Listen string `yaml:"listen"`
	// MaxBodyBytes caps a request body; larger bodies get 413. Default 10 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxBodyBytesInFlight caps the request bodies held at once, counted as
	// they arrive; a request whose body would pass it gets 503. Default the larger of 256
	// MiB and 4 × MaxBodyBytes; at least MaxBodyBytes.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// TLS serves the OpenAI endpoint over HTTPS (HTTP/2 and HTTP/1.1)
	// when set. Its files are read again on every reload, so a renewed
	// certificate takes effect without a restart; turning TLS on or off
	// needs one.
	TLS TLS `yaml:"tls"`
	// BodyReadTimeout bounds the arrival of a request's body, from its
	// headers on: a client that sends it slower gets 408 and loses the
	// connection. Default 30s.
	BodyReadTimeout Duration `yaml:"body_read_timeout"`
	// Upstream tunes the connections to backends.
	Upstream Upstream `yaml:"upstream"`
	// Scrape configures polling each backend's engine metrics for its load.
	Scrape Scrape `yaml:"scrape"`
	// MetricsTokenEnv names the environment variable that, when it holds
	// a token, guards /metrics on the API's listener (callers send
	// "Authorization: Bearer TOKEN"; restart to change). Default
	// "SLUICE_METRICS_TOKEN"; unset or empty: /metrics is open.
	MetricsTokenEnv string `yaml:"metrics_token_env"`
	// CORS lets web pages on other origins call the API (restart to change).
	CORS CORS `yaml:"cors"`
	// SessionHeader names the request header that identifies a conversation
	// for session affinity; without it the OpenAI "user" field is used.
	// Default "X-Session-Id"; must be a valid header name.
	SessionHeader string `yaml:"session_header"`
	// StoredResponsesTTL is how long Sluice remembers which backend made
	// each stored Responses API response (to send the requests that
	// continue, read or delete it there): in Redis with limits.redis_url,
	// else in this replica's memory (its newest 200,000). Default 24h
	// (restart to change).
	StoredResponsesTTL Duration `yaml:"stored_responses_ttl"`
	// Admin configures the operator API (restart to change).
	Admin Admin `yaml:"admin"`
	// Log configures the router's logs (restart to change).
	Log Log `yaml:"log"`
	// Models lists the served models, each with its own backend pool. At least one.
	Models []Model `yaml:"models"`
	// Tiers are the named quota tiers tenants refer to. Optional, but
	// required when Tenants is set.
	Tiers []Tier `yaml:"tiers"`
	// Tenants are the clients allowed to call the router, each with its API
	// key hashes and tier. Optional.
	Tenants []Tenant `yaml:"tenants"`
	// Limits configures the store that tenants' counters live in.
	Limits LimitStore `yaml:"limits"`
	// Batch configures OpenAI's Batch API (restart to change).
	Batch Batch `yaml:"batch"`
}

// Upstream tunes how the router talks to backends.
type Upstream struct {
	// DialTimeout bounds connecting to a backend. Default 2s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for a backend's response headers,
	// which for a streamed answer is time to first byte. Default 60s.
	ResponseHeaderTimeout Duration `yaml:"response_header_timeout"`
	// MaxIdleConnsPerHost is the keep-alive pool per backend. Default 256.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// Retries is how many other backends are tried when one fails before it
	// has sent a response byte. Default 1; write 0 to disable retries.
	Retries *int `yaml:"retries"`
	// StreamIdleTimeout ends a streamed answer whose backend sends nothing
	// for this long; the client gets an error event. Default 60s (it must
	// outlast the slowest prefill of a long prompt).
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// Breaker configures each backend's circuit breaker (restart to change).
	Breaker Breaker `yaml:"breaker"`
	// TLS configures how https:// backends (and their metrics) are
	// verified (restart to change).
	TLS UpstreamTLS `yaml:"tls"`
}

// TLS is a listener's certificate and key, PEM files. Both set: the
// listener serves HTTPS; both empty (the default): plain HTTP.
type TLS struct {
	// CertFile holds the certificate chain, the server's first.
	CertFile string `yaml:"cert_file"`
	// KeyFile holds the certificate's private key.
	KeyFile string `yaml:"key_file"`
}

// On reports whether the listener serves HTTPS.
func (t TLS) On() bool { return t.CertFile != "" || t.KeyFile != "" }

// UpstreamTLS configures the verification of https:// backends' certificates.
type UpstreamTLS struct {
	// CAFile is a PEM bundle of certificate authorities trusted beside the
	// system's, for backends with certificates of a private CA. Default none.
	CAFile string `yaml:"ca_file"`
	// InsecureSkipVerify accepts any certificate a backend presents: for
	// tests only, since anyone on the path can then read the traffic.
	// Default false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Breaker configures the circuit breaker every backend gets: backend
// faults (5xx answers, refused connections, timeouts, answers that break
// off) trip it; client cancels and 4xx answers do not count. An open
// breaker keeps its backend out of routing for open_for, then lets probes
// through: a success closes it, a fault opens it again.
type Breaker struct {
	// Enabled turns breakers on. Default true.
	Enabled *bool `yaml:"enabled"`
	// ConsecutiveFailures trips it after this many faults in a row. Default 5.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// FailureRatio trips it when at least min_requests attempts ended within
	// window and this share of them were faults. Defaults 0.5, 20, 10s.
	FailureRatio float64  `yaml:"failure_ratio"`
	MinRequests  int      `yaml:"min_requests"`
	Window       Duration `yaml:"window"`
	// OpenFor is how long it stays open before probing. Default 5s.
	OpenFor Duration `yaml:"open_for"`
	// Probes is how many attempts a half-open breaker lets through. Default 1.
	Probes int `yaml:"probes"`
}

// On reports whether breakers are enabled (true when unset).
func (b Breaker) On() bool { return b.Enabled == nil || *b.Enabled }

// Scrape configures the poller that reads each backend's /metrics (vLLM,
// SGLang, TGI or gpuworker names, detected per backend) so load-aware
// policies see its queue, running batch and KV-cache use. It applies to
// every backend; changing it needs a restart.
type Scrape struct {
	// Enabled turns scraping on. Default true; write false to route on this
	// replica's own counts only.
	Enabled *bool `yaml:"enabled"`
	// Interval is the time between two scrapes of a backend. Default 100ms;
	// at least 10ms.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one scrape; a scrape that fails or times out marks the
	// backend's load unknown until the next success. Default 80% of
	// interval (80ms); must be below interval.
	Timeout Duration `yaml:"timeout"`
	// Path is the metrics path on each backend. Default "/metrics".
	Path string `yaml:"path"`
}

// On reports whether scraping is enabled (true when unset).
func (s Scrape) On() bool { return s.Enabled == nil || *s.Enabled }

// Log configures what the router logs. Logs are JSON lines on stderr.
type Log struct {
	// Requests logs one line per inference request (message "request"):
	// request_id, route, tenant, model, class, backend, status,
	// input_tokens, output_tokens, latency_ms, ttft_ms for a stream, error
	// for a failure. Default true.
	Requests *bool `yaml:"requests"`
}

// RequestsOn reports whether requests are logged (true when unset).
func (l Log) RequestsOn() bool { return l.Requests == nil || *l.Requests }

// Model is one served model name and the pool of backends that serve it.
type Model struct {
	// Name is the model name clients send in "model". Required, unique.
	Name string `yaml:"name"`
	// Aliases are other names clients may send for this model ("gpt-4o-mini",
	// "chat-default"): /v1/models lists them, and a request naming one is
	// served, limited, counted and logged as this model. Each must be unique
	// across every model's name and aliases. Default none.
	Aliases []string `yaml:"aliases"`
	// Policy names the routing policy for this pool. Default "scored" with
	// its default scorers (expected TTFT with congested packing, queue
	// depth, free KV cache, longest-prefix affinity).
	Policy string `yaml:"policy"`
	// Params are the policy's parameters, decoded strictly by the policy.
	Params map[string]any `yaml:"params"`
	// Backends lists the servers for this model. At least one.
	Backends []Backend `yaml:"backends"`
	// Fallbacks names other models, in order, that serve this model's
	// requests while none of its backends is in routing (all down, held
	// out or breakers open). The request's "model" is rewritten to the
	// fallback's name. Default none.
	Fallbacks []string `yaml:"fallbacks"`
	// Admission holds requests in the router while the model's backends
	// are at their budget, and sheds by service class beyond it. Off
	// unless max_in_flight_per_backend (or a backend's max_in_flight) is set.
	Admission Admission `yaml:"admission"`
	// Timeouts are the model's own request time limits.
	Timeouts ModelTimeouts `yaml:"timeouts"`
}

// ModelTimeouts bounds a model's requests. Both apply on reload.
type ModelTimeouts struct {
	// FirstByte bounds each attempt's wait for its backend's response
	// headers (for a non-streamed answer, usually the whole answer); past
	// it the attempt counts as a timeout and another backend may be tried.
	// Default upstream.response_header_timeout.
	FirstByte Duration `yaml:"first_byte"`
	// Total bounds a request from arrival to the end of its answer,
	// admission wait included: 504 request_timeout before the answer
	// starts, an error event ending a stream after. Default 0: no limit.
	Total Duration `yaml:"total"`
}

// Admin configures the operator API: backends with their live state, add,
// remove and drain a backend, reload, the effective config. It is served
// only when the environment variable token_env holds a token, which callers
// send as "Authorization: Bearer TOKEN".
type Admin struct {
	// Listen is its own address. Default "127.0.0.1:8081".
	Listen string `yaml:"listen"`
	// TokenEnv names the environment variable holding the token. Default
	// "SLUICE_ADMIN_TOKEN".
	TokenEnv string `yaml:"token_env"`
	// TLS serves the admin API and status page over HTTPS when set; its
	// files are read again on every reload, as the endpoint's.
	TLS TLS `yaml:"tls"`
}

// CORS configures Cross-Origin Resource Sharing on the OpenAI endpoint, for
// browser apps that call Sluice from pages served elsewhere.
type CORS struct {
	// AllowedOrigins lists the origins ("https://app.example.com", one "*"
	// wildcard allowed: "https://*.example.com"; "*" alone for any) whose
	// pages may call the API. Empty (the default): no CORS headers, so
	// browsers refuse such calls.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MaxAge is how long a browser may cache a preflight's answer. Default 10m.
	MaxAge Duration `yaml:"max_age"`
}

// ServiceClasses returns the service classes, best first, as OpenAI's
// service_tier names them.
func ServiceClasses() []string { return []string{"priority", "default", "flex"} }

// DefaultServiceClass is a tier's default class.
const DefaultServiceClass = "default"

// Admission configures one model's admission queue.
type Admission struct {
	// MaxInFlightPerBackend is how many requests each backend may have in
	// flight from this router before new ones wait in the router (late
	// binding: a waiting request is bound to a backend only when one has
	// room). 0 (the default) turns admission off unless a backend sets
	// max_in_flight.
	MaxInFlightPerBackend int `yaml:"max_in_flight_per_backend"`
	// QueueSize bounds the requests waiting; beyond it the worst class
	// waiting is shed (flex first, priority last). Default 10000 (at 1024
	// bursts of the Azure code trace filled it below the fleet's capacity
	// in simulation). Each waiting request holds its body, within
	// max_body_bytes_in_flight.
	QueueSize int `yaml:"queue_size"`
	// MaxWait is how long a request of each class may wait before it is
	// shed. Defaults: priority 5s, default 30s, flex 10m.
	MaxWait map[string]Duration `yaml:"max_wait"`
	// KVMax: a backend with requests in flight whose scraped KV-cache use
	// is at least this takes no more (they would wait inside the engine
	// for blocks). Default 0.95; 1 turns it off.
	KVMax float64 `yaml:"kv_max"`
	// MaxPendingPromptTokens: a backend with at least this many prompt
	// tokens sent by this replica and not yet past their first token takes
	// no more, so a request is bound where its prefill starts soon. Set it
	// to about the engine's step token budget (vLLM's
	// max_num_batched_tokens). Default 0: off, and max_pending_prefill
	// bounds instead.
	MaxPendingPromptTokens int64 `yaml:"max_pending_prompt_tokens"`
	// MaxPendingPrefill: a backend with other requests in flight takes no
	// more while the prompt tokens sent it
	// that are not yet past their first token would take at least this at
	// its measured prefill rate (one prompt at a time before the first
	// measurement).
	// The same bound as max_pending_prompt_tokens in time, so one value
	// fits backends of different speeds. With limits.redis_url the
	// replicas hold it together (each lease in Redis carries its prompt
	// until the first token: one more store call per stream, sent in the
	// background, one per backend for the first tokens that came
	// together); without it, or while Redis fails, each of replicas counts
	// only the prompts it sent and holds to 1/replicas of it. Under
	// overload it keeps the backlog in the router's queue, where better
	// classes and lighter tenants go first, and keeps engine steps short;
	// at low load it can cost a step. Default 500ms where neither the
	// model nor any of its backends sets max_pending_prompt_tokens (both
	// together measured worse than either), else none; a negative
	// duration turns it off. Before a backend's prefill rate is first
	// measured (a stream's first token, or a whole answer's time less its
	// decode) a streamed prompt is let in one at a time and a whole (not
	// streamed) answer's prompt does not count.
	MaxPendingPrefill Duration `yaml:"max_pending_prefill"`
	// MaxPendingPrefillByClass gives a service class its own
	// max_pending_prefill, e.g. {priority: 100ms} beside
	// max_pending_prefill: 20ms: flex work then keeps the engines' prefill
	// backlog short while priority requests still bind at once. Classes
	// not named take max_pending_prefill. Default none.
	MaxPendingPrefillByClass map[string]Duration `yaml:"max_pending_prefill_by_class"`
	// MaxPendingPrefillBelowShare: a request whose tenant holds less than
	// its weighted share of the model's requests in flight from this
	// replica, while another tenant holds some, takes this bound where it
	// is larger than its class's, so a light tenant's request binds past a
	// heavy tenant's backlog. A class without a bound stays without. One
	// replica only: not with limits.redis_url. Default 0: off.
	MaxPendingPrefillBelowShare Duration `yaml:"max_pending_prefill_below_share"`
	// MaxDetourBelowShare: a request whose tenant holds less than its
	// weighted share of the model's requests in flight from this replica,
	// while another tenant holds some, is bound only to a backend where
	// its expected time to first token (the prompt tokens ahead of it
	// there, then its own, at the backend's measured prefill rate) is
	// within this of the shortest over the backends under their budgets,
	// and at most 3 times that shortest (admission.DetourFactor: a short
	// prompt an H100 starts in 60 ms does not take an L4 at 300 ms);
	// while no backend with room is, it waits (before the requests of its
	// class behind it, which go meanwhile). A light tenant's long prompt
	// then waits a moment for a fast GPU rather than take a slow one at
	// once beside a heavy tenant's backlog. It applies once every
	// backend's prefill rate is measured, not to Batch API lines nor to
	// retries. Default 250ms; a negative duration turns it off.
	MaxDetourBelowShare Duration `yaml:"max_detour_below_share"`
	// MaxDetourBetterClass is max_detour_below_share for a request whose
	// class is better than another with requests in flight from this
	// replica (priority beside default or flex, default beside flex): a
	// priority request then waits a moment for a fast GPU rather than take
	// a slow one that has room. For fleets that mix GPU speeds: its
	// estimate counts no cached prefix, so on one GPU type with long cached
	// prompts it moves requests off the backend that holds their prefix.
	// Where both apply, the larger. Default 0: off.
	MaxDetourBetterClass Duration `yaml:"max_detour_better_class"`
	// MaxPendingPrefillAboveShare: a request whose tenant holds at least
	// its weighted share of the model's requests in flight from this
	// replica, while another tenant holds some, binds only to a backend
	// where the prompts sent there that its engine has not yet taken into
	// a step come to less than this at the backend's measured prefill
	// rate, besides its class's bound. With Redis the replicas count their
	// prompts together there (each tells Redis of the steps it sees); while
	// Redis fails, or with replicas > 1 and no Redis, each holds its own to
	// its part. A heavy tenant then hands each engine about one
	// new prompt a step, so that a lighter tenant's request starts within
	// a step or two instead of behind the heavy tenant's backlog; the
	// engines stay as busy and the heavy tenant waits longer in Sluice.
	// Engine steps are read from the streams Sluice relays. A class
	// without a bound stays without. Default 10ms; a negative duration
	// turns it off.
	MaxPendingPrefillAboveShare Duration `yaml:"max_pending_prefill_above_share"`
	// MaxPendingPrefillWorseClass: a request of a class worse than one
	// with requests in flight from this replica (flex or default beside
	// priority, flex beside default) binds only to a backend where the
	// prompts its engine has not yet taken into a step come to less than
	// this at the backend's measured prefill rate, besides its class's
	// bound, counted as for max_pending_prefill_above_share (together in
	// Redis). The worse classes then hand each engine about one new
	// prompt a step, so that a better class's request starts within a
	// step or two instead of behind their backlog; the engines stay as
	// busy and the worse classes wait longer in Sluice. A class without a
	// bound stays without. Default 10ms; a negative duration turns it off.
	MaxPendingPrefillWorseClass Duration `yaml:"max_pending_prefill_worse_class"`
	// PendingUntilStep, with max_pending_prefill, counts a prompt toward
	// it only until the backend's next engine step begins, as the bytes of
	// the streams Sluice relays from it show, rather than until its own
	// first token: the next prompt is sent to wait in the engine's queue
	// and starts in the step after, where otherwise it is sent once the
	// first token is back and the engine has already planned that step.
	// With Redis the replicas' common count ends there too: the replica
	// that sent the prompts tells Redis at the step, in one call for all
	// of them. Default false.
	PendingUntilStep bool `yaml:"pending_until_step"`
	// BatchPrefill keeps Batch API lines in what other requests leave:
	// while a backend has other requests in flight from this replica, it
	// takes a batch line only if the prompt tokens awaiting prefill there,
	// the line's included, would take at most this at the backend's
	// measured prefill rate. Default 50ms; a negative duration turns it
	// off.
	BatchPrefill Duration `yaml:"batch_prefill"`
	// BatchReserve is the share of each backend's budget that Batch API
	// lines leave to other requests, rounded up to whole requests (a line
	// may always take one slot). Default (and 0) 0.125; negative turns it off.
	BatchReserve float64 `yaml:"batch_reserve"`
	// Replicas is how many Sluice replicas share the budgets through
	// limits.redis_url. While Redis fails, each replica admits up to
	// budget / replicas on its own. Default 1.
	Replicas int `yaml:"replicas"`
}

// AdmissionOn reports whether admission applies to model m.
func (m Model) AdmissionOn() bool {
	if m.Admission.MaxInFlightPerBackend > 0 {
		return true
	}
	for _, b := range m.Backends {
		if b.MaxInFlight > 0 {
			return true
		}
	}
	return false
}

// Backend is one OpenAI-compatible server.
type Backend struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:9001. Required; http or https.
	URL string `yaml:"url"`
	// ServedModel is the name this backend serves the model under (vLLM's
	// --served-model-name, by default the Hugging Face path): requests
	// reach it with "model" rewritten to it. Default: the model's name.
	ServedModel string `yaml:"served_model"`
	// Weight is the relative share for weighted policies. Default 1.
	Weight int `yaml:"weight"`
	// APIKey is the key Sluice presents to this backend (Authorization:
	// Bearer), for servers started with one (vLLM's --api-key). Clients'
	// own keys never reach a backend. Default none.
	APIKey string `yaml:"api_key"`
	// MaxInFlight overrides the model's admission.max_in_flight_per_backend
	// for this backend (a bigger GPU takes more). Default 0: the model's.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxPendingPromptTokens overrides the model's
	// admission.max_pending_prompt_tokens for this backend: set each to
	// its engine's step token budget (vLLM's max_num_batched_tokens, e.g.
	// 8192 on an H100 and 2048 on an L4 by vLLM's defaults). Default 0:
	// the model's.
	MaxPendingPromptTokens int64 `yaml:"max_pending_prompt_tokens"`
	// APIKeyEnv names an environment variable holding the key instead, so
	// it stays out of the file; read at start and on every reload. At most
	// one of api_key and api_key_env.
	APIKeyEnv string `yaml:"api_key_env"`
}

// Duration is a time.Duration written in YAML as a Go duration string ("250ms").
type Duration time.Duration

// UnmarshalYAML accepts a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"2s\": %w", n.Line, err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Load reads, decodes, defaults and validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes b strictly, applies defaults and validates the result.
func Parse(b []byte) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty")
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode: more than one YAML document")
	}
	var c Config
	strict := yaml.NewDecoder(bytes.NewReader(b))
	strict.KnownFields(true)
	if err := strict.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode: %s", nameFields(&root, err.Error()))
	}
	if err := wholeNumbers(&root, reflect.TypeOf(c)); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
