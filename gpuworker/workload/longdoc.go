package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// LongDocOptions configures LongDoc. Zero fields mean the defaults given on
// each field; at least one of Duration and Count must be set, and
// generation stops at whichever comes first.
type LongDocOptions struct {
	// Rate is the mean arrival rate in requests per second (> 0).
	Rate float64
	// Duration stops arrivals at this offset; zero means no time bound.
	Duration time.Duration
	// Count stops after this many requests; zero means no count bound.
	Count int
	// Seed makes the workload reproducible.
	Seed uint64

	// Pool is the number of documents questions are asked about (default
	// 1000). With Zipf it sets how often a document comes back: a smaller
	// pool or a larger exponent means more repeats.
	Pool int
	// Zipf is the exponent s of the documents' popularity: document k
	// (from 0) is picked with probability proportional to 1/(k+1)^s. Zero
	// means uniform; sluice-bench passes 1.
	Zipf float64
	// DocMin and DocMax bound the document lengths, which are log-uniform
	// between them (defaults 8192 and 32768; DocMin at least BlockTokens).
	// A document keeps its length each time it is asked about.
	DocMin, DocMax int
	// Question is the length of the question after the document (default
	// log-normal, mean 120, sigma 0.4, max 200: about 50 to 200 tokens).
	Question LengthDist
	// Output is the answer length (default log-normal, mean 350, sigma
	// 0.25, max 500: about 200 to 500 tokens).
	Output LengthDist
}

// WithDefaults returns o with every zero field replaced by its default.
// LongDoc applies it; callers use it to show what a run will use.
func (o LongDocOptions) WithDefaults() LongDocOptions {
	if o.Pool == 0 {
		o.Pool = 1000
	}
	if o.DocMin == 0 {
		o.DocMin = 8192
	}
	if o.DocMax == 0 {
		o.DocMax = 32768
	}
	if o.Question == (LengthDist{}) {
		o.Question = LengthDist{Mean: 120, Sigma: 0.4, Max: 200}
	}
	if o.Output == (LengthDist{}) {
		o.Output = LengthDist{Mean: 350, Sigma: 0.25, Max: 500}
	}
	return o
}

// LongDoc generates questions about long documents (retrieval, summaries,
// code review): each prompt is a document from a pool of Pool, picked by
// Zipf popularity, followed by a question unique to the request, with
// Poisson arrivals at Rate, the first at 0. A document asked about again
// is a long shared prefix, which only a cache-aware router keeps hitting.
//
// HashIDs name every block of the prompt: the whole blocks of the document
// carry that document's ids, and every later block, including the one
// where the document ends and the question begins, gets a fresh id.
// Lengths and ids depend on the seed only, not on Rate. The same options
// always give the same requests.
func LongDoc(opts LongDocOptions) ([]Request, error) {
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("long-doc workload: %w", err)
	}
	type doc struct {
		tokens int
		ids    []int // of its whole blocks
	}
	var ids idAlloc
	docs := map[int]doc{} // the documents asked about so far
	pop := newPopularity(o.Pool, o.Zipf)
	rng := rand.New(rand.NewPCG(o.Seed, streamLongDoc))
	next := func() Request {
		k := pop.draw(rng)
		d, ok := docs[k]
		if !ok {
			d.tokens = o.docLength(k)
			d.ids = ids.takeN(d.tokens / BlockTokens)
			docs[k] = d
		}
		prompt := d.tokens + o.Question.sample(rng)
		return Request{
			PromptTokens: prompt,
			OutputTokens: o.Output.sample(rng),
			HashIDs:      withPrefix(d.ids, prompt, &ids),
		}
	}
	return openLoop(bounds{o.Rate, o.Duration, o.Count}, o.Seed, next), nil
}

// docLength draws document d's length from its own stream, so it does not
// depend on when the document is first asked about.
func (o LongDocOptions) docLength(d int) int {
	rng := rand.New(rand.NewPCG(o.Seed^streamDocLength, uint64(d)))
	lo, hi := math.Log(float64(o.DocMin)), math.Log(float64(o.DocMax))
	n := int(math.Round(math.Exp(lo + rng.Float64()*(hi-lo))))
	return min(max(n, o.DocMin), o.DocMax)
}

// validate reports every bad option at once.
func (o LongDocOptions) validate() error {
	errs := bounds{o.Rate, o.Duration, o.Count}.validate()
	if o.Pool < 1 || o.Pool > MaxPopulation {
		errs = append(errs, fmt.Errorf("pool %d must be in [1, %d]", o.Pool, MaxPopulation))
	}
	if err := validZipf(o.Zipf); err != nil {
		errs = append(errs, err)
	}
	if o.DocMin < BlockTokens {
		errs = append(errs, fmt.Errorf("doc min %d must be at least %d: a shorter document shares no whole block", o.DocMin, BlockTokens))
	}
	if o.DocMax < o.DocMin || o.DocMax > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("doc max %d must be at least doc min %d and at most %d", o.DocMax, o.DocMin, math.MaxInt32))
	}
	if err := validLengths("question", o.Question); err != nil {
		errs = append(errs, err)
	}
	if err := validLengths("output", o.Output); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
