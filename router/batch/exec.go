package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// verdict is what becomes of a line after one run.
type verdict int

const (
	// recorded: the answer is the line's result.
	recorded verdict = iota
	// noCapacity: admission had no room for flex work; the line waits and
	// its model is held off.
	noCapacity
	// overQuota: the tenant's rate limits refused it; the line waits and
	// the tenant is held off.
	overQuota
	// faulted: the fleet failed it; it runs again, up to MaxAttempts.
	faulted
	// stopped: the runner or the batch stopped it; it is pending again.
	stopped
)

func (v verdict) String() string {
	switch v {
	case noCapacity:
		return "no_capacity"
	case overQuota:
		return "over_quota"
	case faulted:
		return "fault"
	case stopped:
		return "stopped"
	}
	return "recorded"
}

// runLine runs one line and records or gives back the outcome.
func (r *Runner) runLine(t task) {
	defer r.done(t.b, t.line)
	res, v, wait := r.execute(t)
	key := lineKey{batch: t.b.ID, line: t.line}
	now := r.s.o.Now()
	switch v {
	case recorded:
		r.answered(t.b.Model)
	case noCapacity:
		r.refused(t.b.Model, wait, now)
	case overQuota:
		r.holdTenant(t.b.Owner, wait, now)
	case faulted:
		r.mu.Lock()
		r.attempts[key]++
		final := r.attempts[key] >= r.o.MaxAttempts
		r.mu.Unlock()
		if final {
			v = recorded
		}
	}
	if v != recorded {
		r.lines.WithLabelValues(v.String()).Inc()
		r.release(t.b.ID, t.line)
		return
	}
	if res.OK() {
		r.lines.WithLabelValues("completed").Inc()
	} else {
		r.lines.WithLabelValues("failed").Inc()
	}
	r.mu.Lock()
	delete(r.attempts, key)
	r.mu.Unlock()
	ctx, cancel := storeCtx()
	defer cancel()
	if _, err := r.s.o.Store.Finish(ctx, t.b.ID, t.line, res); err != nil {
		r.s.o.Logger.Warn("batch runner: recording a result", "batch", t.b.ID, "line", t.line, "err", err)
		r.release(t.b.ID, t.line)
	}
}

// execute sends the line through the Handler as the batch's tenant, in the
// flex class, and judges the answer; wait is the answer's Retry-After.
func (r *Runner) execute(t task) (res Result, v verdict, wait time.Duration) {
	in, err := r.input(t.b)
	if err != nil {
		r.s.o.Logger.Warn("batch runner: reading input", "batch", t.b.ID, "err", err)
		return Result{}, stopped, 0
	}
	if t.line >= len(in.index) {
		return Result{ErrCode: "invalid_line", ErrMessage: "the line is not in the input file"}, recorded, 0
	}
	sp := in.index[t.line]
	raw := make([]byte, sp.n)
	if _, err := in.f.ReadAt(raw, sp.off); err != nil {
		r.s.o.Logger.Warn("batch runner: reading input", "batch", t.b.ID, "err", err)
		return Result{}, stopped, 0
	}
	var line inputLine
	if err := json.Unmarshal(raw, &line); err != nil || line.CustomID == nil {
		return Result{ErrCode: "invalid_line", ErrMessage: "the line is not valid any more"}, recorded, 0
	}
	res.CustomID = *line.CustomID
	body, err := flexBody(line.Body)
	if err != nil {
		res.ErrCode, res.ErrMessage = "invalid_body", "body: "+jsonProblem(err)
		return res, recorded, 0
	}
	req, err := http.NewRequestWithContext(r.o.RunAs(t.ctx, t.b.Owner, r.draining), http.MethodPost, line.URL, bytes.NewReader(body))
	if err != nil {
		res.ErrCode, res.ErrMessage = "invalid_url", err.Error()
		return res, recorded, 0
	}
	req.Header.Set("Content-Type", "application/json")
	rec := newRecorder(maxResultBytes)
	aborted := serve(r.o.Handler, rec, req)
	if t.ctx.Err() != nil {
		return res, stopped, 0
	}
	res.Status, res.RequestID = rec.code(), rec.h.Get("X-Request-Id")
	res.Body = asJSON(rec.body.Bytes())
	switch {
	case aborted:
		res.Status = http.StatusBadGateway
		res.Body = asJSON([]byte("the answer broke off"))
		return res, faulted, 0
	case rec.over:
		res.Status = http.StatusInternalServerError
		res.Body = asJSON([]byte("the answer is larger than " + formatBytes(maxResultBytes)))
		return res, recorded, 0
	}
	wait = retryAfter(rec.h)
	switch code := errorCode(res.Body); {
	case res.OK():
		res.Input, res.Output = usageOf(res.Body)
		return res, recorded, 0
	case res.Status == http.StatusTooManyRequests && code == "resource_unavailable",
		res.Status == http.StatusServiceUnavailable:
		return res, noCapacity, wait
	case res.Status == http.StatusTooManyRequests && !strings.HasPrefix(errorMessage(res.Body), "Request too large"):
		return res, overQuota, wait
	case res.Status >= 500:
		return res, faulted, 0
	}
	return res, recorded, 0
}

// serve runs h, turning the panic a reverse proxy uses to abort an answer
// that broke off (http.ErrAbortHandler) into aborted.
func serve(h http.Handler, w http.ResponseWriter, req *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				aborted = true
				return
			}
			panic(v)
		}
	}()
	h.ServeHTTP(w, req)
	return false
}

// flexBody is the line's body as sent: in the flex service class, and
// never streamed (a batch keeps whole answers). It is the one re-encoding
// of a request Sluice makes.
func flexBody(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["service_tier"] = json.RawMessage(`"flex"`)
	if _, ok := m["stream"]; ok {
		m["stream"] = json.RawMessage(`false`)
	}
	delete(m, "stream_options")
	// Not json.Marshal: it escapes <, > and & as \u003c..., six bytes for
	// one, so a body that passed validation could grow sixfold and be
	// refused 413 after the runner held it (a line of "<" took 10 MB to
	// 60). Compacted and unescaped, it grows by its service_tier only.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// flexGrowth is the most flexBody adds to a body.
const flexGrowth = len(`,"service_tier":"flex"`)

// asJSON returns b if it is JSON, else b as a JSON string.
func asJSON(b []byte) json.RawMessage {
	if len(b) > 0 && json.Valid(b) {
		return bytes.Clone(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

type errorEnvelope struct {
	Error struct {
		Code    *string `json:"code"`
		Message string  `json:"message"`
	} `json:"error"`
}

func errorCode(body []byte) string {
	var e errorEnvelope
	if json.Unmarshal(body, &e) != nil || e.Error.Code == nil {
		return ""
	}
	return *e.Error.Code
}

func errorMessage(body []byte) string {
	var e errorEnvelope
	_ = json.Unmarshal(body, &e)
	return e.Error.Message
}

func usageOf(body []byte) (in, out int64) {
	var u struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(body, &u)
	return u.Usage.PromptTokens, u.Usage.CompletionTokens
}

// retryAfter reads Retry-After-Ms, else Retry-After (seconds).
func retryAfter(h http.Header) time.Duration {
	if ms, err := strconv.ParseInt(h.Get("Retry-After-Ms"), 10, 64); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	if s, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// recorder is the http.ResponseWriter a line is answered into: whole, up
// to limit bytes.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
	limit  int
	over   bool
}

func newRecorder(limit int) *recorder { return &recorder{h: http.Header{}, limit: limit} }

func (w *recorder) Header() http.Header { return w.h }

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.body.Len()+len(p) > w.limit {
		w.over = true
		return 0, errors.New("batch: answer too large")
	}
	return w.body.Write(p)
}

// Flush is a no-op: the answer is kept whole.
func (w *recorder) Flush() {}

func (w *recorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
