package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// admissionFlags are simulate's flags of the admit stage.
type admissionFlags struct {
	admit          bool
	maxWait        string
	budget         string
	queueMax       int
	prefill        float64
	pendingPrefill time.Duration
	classPrefill   string
	belowShare     time.Duration
	aboveShare     time.Duration
	worseClass     time.Duration
	detour         time.Duration
	belowDetour    time.Duration
	betterDetour   time.Duration
	sameStep       bool
	releaseAtStep  bool
	kvMax          float64
	batchPre       time.Duration
	weights        string

	tenantWeights map[string]float64 // parsed --tenant-weights

	waits      [admission.NumClasses]time.Duration // parsed --max-wait
	prefills   [admission.NumClasses]time.Duration // parsed --max-pending-prefill-by-class
	budgetAll  int                                 // --budget N
	budgetByPr map[string]int                      // --budget PROFILE=N,...

	// registeredOn is the flag set register added the flags to; it tells
	// the flags a user gave from defaults, since an admit-stage flag given
	// without --admission is an error even at its default value.
	registeredOn *flag.FlagSet
}

func (a *admissionFlags) register(fs *flag.FlagSet) {
	a.registeredOn = fs
	fs.BoolVar(&a.admit, "admission", false, "run the policy rows through admission control: each worker takes at most its budget of requests in flight, the rest wait in one queue (by service class, then token-fair between tenants, then arrival) and are bound to a worker only when it has room (late binding); a request that waits past its class's maximum, or that a full queue pushes out (flex first), is shed. The oracle row is unchanged")
	fs.StringVar(&a.maxWait, "max-wait", "", "with --admission, each class's longest wait, e.g. priority=30s,flex=10m (defaults, the router's: priority 5s, default 30s, flex 10m; a negative duration means no limit)")
	fs.StringVar(&a.budget, "budget", "", "with --admission, every worker's budget of requests in flight (`N`), or per profile (PROFILE=N,...); default: the batch a saturated worker runs for this workload, plus one step's prompts (fleet.DefaultBudgets)")
	fs.DurationVar(&a.pendingPrefill, "max-pending-prefill", 0, "with --admission, a worker with requests in flight has room only while the prompt tokens bound to it and not yet prefilled would take less than this at the prefill rate the router measured for it (the router's admission.max_pending_prefill; one prompt at a time before the first measurement; default, the router's, 500ms unless --prefill-steps is given; negative = off)")
	fs.StringVar(&a.classPrefill, "max-pending-prefill-by-class", "", "with --admission, a class's own --max-pending-prefill, e.g. priority=100ms (the router's admission.max_pending_prefill_by_class; classes not named take --max-pending-prefill)")
	fs.DurationVar(&a.belowShare, "max-pending-prefill-below-share", 0, "with --admission, the prefill bound of a request whose tenant holds less than its weighted share of the requests in flight while another tenant holds some, where larger than its class's (the router's admission.max_pending_prefill_below_share; 0 = off)")
	fs.DurationVar(&a.worseClass, "max-pending-prefill-worse-class", 0, "with --admission, a request of a class worse than one with requests in flight (flex beside priority) binds only to a worker whose prompts bound since its engine's last step take less than this at the measured prefill rate (the router's admission.max_pending_prefill_worse_class; default, the router's, 10ms; negative = off)")
	fs.DurationVar(&a.aboveShare, "max-pending-prefill-above-share", 0, "with --admission, a request whose tenant holds at least its weighted share of the requests in flight while another tenant holds some binds only to a worker whose prompts bound since its engine's last step take less than this at the measured prefill rate (the router's admission.max_pending_prefill_above_share; default, the router's, 10ms; negative = off)")
	fs.Float64Var(&a.prefill, "prefill-steps", 0, "with --admission, a worker has room only while the prompt tokens bound to it and not yet prefilled are fewer than this many of its steps' token budgets (the router's max_pending_prompt_tokens on each backend at that many of its engine's max_num_batched_tokens; as there, --max-pending-prefill then has no default; default 0: off)")
	fs.BoolVar(&a.sameStep, "same-step", false, "with --admission, bind the requests a worker's step made room for before it plans its next step, so they join that step (a router with no delay between a step and its answers; the live router's requests start at the step after)")
	fs.BoolVar(&a.releaseAtStep, "release-at-step", false, "with --admission and --max-pending-prefill, count a bound prompt toward the bound only until its worker plans a step after it was bound, not until its first token (a what-if: the router counts until the first token)")
	fs.DurationVar(&a.detour, "max-detour", 0, "with --admission, a worker takes the next request only if the request's estimated time to first token there is within this of its best estimate on any worker; otherwise the request waits for one that suits it and later ones may go ahead (a what-if: the router has no such rule; default 0: off)")
	fs.DurationVar(&a.betterDetour, "max-detour-better-class", 0, "with --admission, the same for a request whose class is better than another with requests in flight (priority beside flex), the larger where both apply (the router's admission.max_detour_better_class; default, the router's, 0 = off)")
	fs.DurationVar(&a.belowDetour, "max-detour-below-share", 0, "with --admission, a request whose tenant holds less than its weighted share of the requests in flight, while another tenant holds some, binds only where its estimated time to first token is within this of its best estimate on any worker and at most 3x that best, and waits set aside for such a worker (the router's admission.max_detour_below_share; default, the router's, 250ms; negative = off; --max-detour, for every request, takes its place)")
	fs.Float64Var(&a.kvMax, "kv-max", 0, "with --admission, the scraped KV-cache use (0..1) at which a busy worker takes no more requests (default 0.95; negative = off)")
	fs.DurationVar(&a.batchPre, "batch-prefill", 0, "with --admission and --batch, while a worker has other requests in flight it takes a batch line only if the prompts bound to it and not yet prefilled, the line's included, take at most this at its prefill rate, so the batch stays in what the other requests leave (default 50ms; negative = off)")
	fs.StringVar(&a.weights, "tenant-weights", "", "with --admission and --tenants, tenants' weights in the queue's token-fair share, e.g. light=4 (default 1 each): a tenant with weight W is served W tokens for every token of a weight-1 tenant while both wait")
	fs.IntVar(&a.queueMax, "queue-max", 0, "with --admission, the most requests that may wait; a full queue sheds flex first (default, the router's queue_size: 10000)")
}

// validate parses --max-wait and --budget, and rejects a flag given where
// it would have no effect. batch says whether --batch is given.
func (a *admissionFlags) validate(batch bool) error {
	var errs []error
	given := map[string]bool{}
	if a.registeredOn != nil {
		a.registeredOn.Visit(func(f *flag.Flag) { given[f.Name] = true })
	}
	if !a.admit {
		// Every flag of the admit stage, in the order the error names them.
		var names []string
		for _, name := range []string{"max-wait", "budget", "queue-max", "max-pending-prefill", "max-pending-prefill-by-class", "max-pending-prefill-below-share", "max-pending-prefill-above-share", "prefill-steps",
			"same-step", "release-at-step", "max-detour", "max-detour-below-share", "kv-max", "batch-prefill", "tenant-weights"} {
			if given[name] {
				names = append(names, "--"+name)
			}
		}
		switch len(names) {
		case 0:
		case 1:
			errs = append(errs, fmt.Errorf("%s needs --admission", names[0]))
		default:
			last := len(names) - 1
			errs = append(errs, fmt.Errorf("%s and %s need --admission", strings.Join(names[:last], ", "), names[last]))
		}
	}
	if a.belowShare < 0 {
		errs = append(errs, errors.New("--max-pending-prefill-below-share must not be negative (0 is off)"))
	}
	if a.classPrefill != "" {
		var err error
		if a.prefills, err = parseClassDurations("--max-pending-prefill-by-class", a.classPrefill, false); err != nil {
			errs = append(errs, err)
		}
	}
	pendingOff := (&fleet.Admission{PendingPrefill: a.pendingPrefill, PrefillSteps: a.prefill}).PendingPrefillBound() == 0
	if a.releaseAtStep && pendingOff && a.prefills == [admission.NumClasses]time.Duration{} {
		errs = append(errs, errors.New("--release-at-step needs --max-pending-prefill: it changes how long a prompt counts toward that bound, which is off"))
	}
	if given["batch-prefill"] && !batch {
		errs = append(errs, errors.New("--batch-prefill needs --batch: it bounds the batch's lines"))
	}
	if a.weights != "" {
		shares, err := parseShares(a.weights)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tenant-weights: %w", err))
		}
		a.tenantWeights = map[string]float64{}
		for _, sh := range shares {
			if sh.weight < 1 {
				errs = append(errs, fmt.Errorf("--tenant-weights: %s's weight must be at least 1", sh.name))
			}
			a.tenantWeights[sh.name] = sh.weight
		}
	}
	if a.queueMax < 0 {
		errs = append(errs, errors.New("--queue-max must not be negative"))
	}
	if a.maxWait != "" {
		var err error
		if a.waits, err = parseClassDurations("--max-wait", a.maxWait, true); err != nil {
			errs = append(errs, err)
		}
	}
	if a.budget != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(a.budget)); err == nil {
			if n < 1 {
				errs = append(errs, errors.New("--budget must be at least 1"))
			}
			a.budgetAll = n
		} else {
			a.budgetByPr = map[string]int{}
			for item := range strings.SplitSeq(a.budget, ",") {
				name, v, ok := strings.Cut(strings.TrimSpace(item), "=")
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if !ok || err != nil || n < 1 {
					errs = append(errs, fmt.Errorf("--budget %q: want N or PROFILE=N with N at least 1", item))
					continue
				}
				a.budgetByPr[strings.TrimSpace(name)] = n
			}
		}
	}
	return errors.Join(errs...)
}

// parseClassDurations reads CLASS=DURATION,... for the flag named name:
// durations not zero, and positive unless negative is allowed.
func parseClassDurations(name, s string, negative bool) ([admission.NumClasses]time.Duration, error) {
	var out [admission.NumClasses]time.Duration
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		class, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		c, known := admission.ParseClass(strings.TrimSpace(class))
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case !ok || !known:
			errs = append(errs, fmt.Errorf("%s %q: want CLASS=DURATION with class priority, default or flex", name, item))
		case err != nil || d == 0 || d < 0 && !negative:
			want := "a positive duration"
			if negative {
				want = "a non-zero duration"
			}
			errs = append(errs, fmt.Errorf("%s %q: want %s", name, item, want))
		default:
			out[c] = d
		}
	}
	return out, errors.Join(errs...)
}

// checkTenants checks that --tenant-weights names only tenants of
// --tenants.
func (a *admissionFlags) checkTenants(tenants []string) error {
	for name := range a.tenantWeights {
		if !slices.Contains(tenants, name) {
			return fmt.Errorf("--tenant-weights: --tenants names no tenant %q", name)
		}
	}
	return nil
}

// checkSpec checks that --budget names only profiles of the fleet.
func (a *admissionFlags) checkSpec(spec fleet.Spec) error {
	for name := range a.budgetByPr {
		found := false
		for _, g := range spec {
			found = found || g.Profile.Name == name
		}
		if !found {
			return fmt.Errorf("--budget: the fleet has no profile %q", name)
		}
	}
	return nil
}

// options returns the admit stage's options, or nil without --admission.
func (a *admissionFlags) options(spec fleet.Spec, reqs []workload.Request) *fleet.Admission {
	if !a.admit {
		return nil
	}
	opts := &fleet.Admission{MaxWait: a.waits, QueueMax: a.queueMax, PrefillSteps: a.prefill, PendingPrefill: a.pendingPrefill, ClassPendingPrefill: a.prefills, BelowSharePrefill: a.belowShare, AboveSharePrefill: a.aboveShare, WorseClassPrefill: a.worseClass, MaxDetour: a.detour, BelowShareDetour: a.belowDetour, BetterClassDetour: a.betterDetour, SameStep: a.sameStep, ReleaseAtStep: a.releaseAtStep, KVMax: a.kvMax, BatchPrefill: a.batchPre, Weights: a.tenantWeights}
	if a.budgetAll > 0 || a.budgetByPr != nil {
		for _, g := range spec {
			n := a.budgetAll
			if a.budgetByPr != nil {
				n = a.budgetByPr[g.Profile.Name] // 0: the default
			}
			for range g.Count {
				opts.Budget = append(opts.Budget, n)
			}
		}
	}
	return opts
}

// describeAdmission says what the admit stage runs with: the budget per
// fleet group, each class's longest wait and the queue's bound.
func describeAdmission(spec fleet.Spec, reqs []workload.Request, a *fleet.Admission) string {
	budgets := fleet.DefaultBudgets(spec, reqs)
	for w, n := range a.Budget {
		if n >= 1 {
			budgets[w] = n
		}
	}
	var b strings.Builder
	b.WriteString("budget of requests in flight")
	w := 0
	for i, g := range spec {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", g.Profile.Name, budgets[w])
		w += g.Count
	}
	b.WriteString("; max wait")
	for c := range admission.NumClasses {
		d := a.MaxWait[c]
		if d == 0 {
			d = fleet.DefaultMaxWait[c]
		}
		s := d.String()
		if d < 0 {
			s = "none"
		}
		if c > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %s", c, s)
	}
	q := a.QueueMax
	if q == 0 {
		q = fleet.DefaultQueueMax
	}
	fmt.Fprintf(&b, "; queue max %d", q)
	// The room rules beside the budget and the KV bound, and any the
	// router does not have.
	if steps := a.PrefillSteps; steps > 0 {
		fmt.Fprintf(&b, "; room needs prompts pending under %g step token budget(s) (the router's max_pending_prompt_tokens at each engine's)", steps)
	}
	if pending := a.PendingPrefillBound(); pending > 0 {
		fmt.Fprintf(&b, "; room needs prompts pending under %s of prefill at the measured rate (the router's max_pending_prefill)", pending)
	}
	if above := a.AboveSharePrefillBound(); above > 0 && (a.PendingPrefillBound() > 0 || slices.ContainsFunc(a.ClassPendingPrefill[:], func(d time.Duration) bool { return d > 0 })) {
		fmt.Fprintf(&b, "; a tenant at or above its share beside another binds where the prompts not yet in an engine step take under %s (the router's max_pending_prefill_above_share)", above)
	}
	if worse := a.WorseClassPrefillBound(); worse > 0 && (a.PendingPrefillBound() > 0 || slices.ContainsFunc(a.ClassPendingPrefill[:], func(d time.Duration) bool { return d > 0 })) {
		fmt.Fprintf(&b, "; a class behind a better one in flight binds where the prompts not yet in an engine step take under %s (the router's max_pending_prefill_worse_class)", worse)
	}
	if a.MaxDetour > 0 {
		fmt.Fprintf(&b, "; room needs a detour of at most %s (a what-if: the router has no such rule)", a.MaxDetour)
	} else if d := a.BelowShareDetourBound(); d > 0 {
		fmt.Fprintf(&b, "; a tenant below its share binds within %s of its quickest start (the router's max_detour_below_share)", d)
	}
	if d := a.BetterClassDetour; d > 0 && a.MaxDetour <= 0 {
		fmt.Fprintf(&b, "; a class ahead of a worse one in flight binds within %s of its quickest start (the router's max_detour_better_class)", d)
	}
	return b.String()
}

// describeShares prints the share of requests and of tokens each class and
// tenant drew.
func describeShares(w io.Writer, reqs []workload.Request, classes []admission.Class, tenants []string) {
	line := func(what string, keyOf func(i int) string, order []string) {
		reqN, tok := map[string]int{}, map[string]int64{}
		var total int64
		for i, r := range reqs {
			k := keyOf(i)
			reqN[k]++
			t := int64(r.PromptTokens + r.OutputTokens)
			tok[k] += t
			total += t
		}
		var b strings.Builder
		for _, k := range order {
			fmt.Fprintf(&b, " %s %d requests (%.3f of tokens)", k, reqN[k], float64(tok[k])/float64(max(total, 1)))
		}
		fmt.Fprintf(w, "sluice-bench: %s:%s\n", what, b.String())
	}
	if classes != nil {
		line("classes", func(i int) string { return classes[i].String() }, classNames(classes))
	}
	if tenants != nil {
		seen := map[string]bool{}
		var order []string
		for _, t := range tenants {
			if !seen[t] {
				seen[t] = true
				order = append(order, t)
			}
		}
		line("tenants", func(i int) string { return tenants[i] }, order)
	}
}

// splitOrder is the order of a split report's rows.
type splitOrder struct {
	classes, tenants []string
}

// splitOrder lists the classes present (default alone without --mix) when
// the report is split by class, and the tenants in --tenants order.
func (f *simFlags) splitOrder(classes []admission.Class) splitOrder {
	var o splitOrder
	if f.mix != "" || f.admit {
		o.classes = []string{admission.Default.String()}
		if classes != nil {
			o.classes = classNames(classes)
		}
	}
	o.tenants = f.tenantNames()
	return o
}

// split adds the report split by class (with --mix or --admission), the
// shed counts (when the row ran admission) and the split by tenant
// (--tenants) to row. samples holds the row's samples (summarizeSim);
// each part's ITL comes from the simulator's histograms.
func (f *simFlags) split(row *simResult, res *fleet.Result, samples []report.Sample, classes []admission.Class, admitted bool) {
	order := f.splitOrder(classes)
	outs := res.Requests
	if order.classes != nil {
		row.Classes = splitReports(samples, order.classes, func(i int) string { return outs[i].Class.String() },
			res.Elapsed, f.goodTTFT, f.goodTPOT)
		for k, p := range row.Classes {
			if c, ok := admission.ParseClass(k); ok && res.ClassITL != nil {
				p.ITL = histDist(res.ClassITL[c])
			} else {
				p.ITL = row.ITL // one class: the whole run's
			}
			row.Classes[k] = p
		}
	}
	if admitted {
		row.Shed = make(map[string]int, len(order.classes))
		for _, k := range order.classes {
			row.Shed[k] = 0
		}
		for i := range outs {
			if outs[i].Shed() {
				row.Shed[outs[i].Class.String()]++
			}
		}
	}
	if st := res.Admission; st != nil {
		sat := &saturationStat{SaturatedS: st.Saturated.Seconds(), Classes: map[string]boundRate{}}
		for _, k := range order.classes {
			c, _ := admission.ParseClass(k)
			var r boundRate
			if sat.SaturatedS > 0 {
				r = boundRate{float64(st.Bound[c]) / sat.SaturatedS, float64(st.BoundTokens[c]) / sat.SaturatedS}
			}
			sat.Classes[k] = r
		}
		row.Saturation = sat
	}
	if order.tenants != nil {
		row.Tenants = splitReports(samples, order.tenants, func(i int) string { return outs[i].Tenant },
			res.Elapsed, f.goodTTFT, f.goodTPOT)
		for k, p := range row.Tenants {
			if h := res.TenantITL[k]; h != nil {
				p.ITL = histDist(h)
				row.Tenants[k] = p
			}
		}
	}
}

// saturationStat is what each class got while the fleet was saturated
// (some request waited in the admission queue): the requests bound in that
// time, after waiting or at once while another waited, and their prompt
// and output tokens, per second of that time.
// Set against the fleet's capacity estimate less the better classes' rate,
// it says how much of the spare capacity a class took.
type saturationStat struct {
	SaturatedS float64              `json:"saturated_s"`
	Classes    map[string]boundRate `json:"classes"`
}

// boundRate is one class's rate while saturated.
type boundRate struct {
	RequestsPerS float64 `json:"requests_per_s"`
	TokensPerS   float64 `json:"tokens_per_s"`
}

func (s *saturationStat) write(w io.Writer, order []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Saturated (requests waiting) for %.1f s; bound after waiting, per second of it:", s.SaturatedS)
	for _, k := range order {
		r := s.Classes[k]
		fmt.Fprintf(&b, " %s %.2f req/s (%.0f tok/s);", k, r.RequestsPerS, r.TokensPerS)
	}
	if _, err := fmt.Fprintln(w, strings.TrimSuffix(b.String(), ";")); err != nil {
		return fmt.Errorf("write saturation: %w", err)
	}
	return nil
}
