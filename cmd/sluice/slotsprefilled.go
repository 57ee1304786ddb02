package main

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-llm/sluice/policies/admission"
)

// batchedPrefilled takes the shared store's Prefilled calls off the
// streams' goroutines: with max_pending_prefill held in Redis (its default)
// every stream tells the store at its first token that its prompt is no
// longer pending, a round trip made after the first token was sent but
// before the next bytes were relayed, and up to the store's timeout when
// Redis stalls. While Run runs, Prefilled queues the leases and returns;
// Run sends what has queued, one call per backend for all of its leases.
// Without Run, or with the queue full, Prefilled calls the store itself,
// as before. Stepped (made on the goroutine of the stream that marked an
// engine step) is queued and sent the same way. The other calls pass
// through.
type batchedPrefilled struct {
	admission.Slots
	queue   chan prefilledCall
	running atomic.Bool
	onErr   func(error) // a failed call, for the store's health; nil: none
}

type prefilledCall struct {
	pool, backend string
	stepped       bool // a Stepped call, not a Prefilled
	leases        []string
}

// prefilledQueue bounds the calls waiting for Run; beyond it Prefilled
// calls the store itself.
const prefilledQueue = 4096

// prefilledTimeout bounds each call Run makes, as the gate bounds its own.
const prefilledTimeout = 50 * time.Millisecond

func newBatchedPrefilled(next admission.Slots, onErr func(error)) *batchedPrefilled {
	return &batchedPrefilled{Slots: next, queue: make(chan prefilledCall, prefilledQueue), onErr: onErr}
}

// Prefilled queues the call for Run when Run runs and there is room, else
// makes it.
func (b *batchedPrefilled) Prefilled(ctx context.Context, pool, backend string, leases ...string) error {
	if b.queued(prefilledCall{pool: pool, backend: backend, leases: leases}) {
		return nil
	}
	return b.Slots.Prefilled(ctx, pool, backend, leases...)
}

// Stepped queues the call for Run when Run runs and there is room, else
// makes it.
func (b *batchedPrefilled) Stepped(ctx context.Context, pool, backend string, leases ...string) error {
	if b.queued(prefilledCall{pool: pool, backend: backend, stepped: true, leases: leases}) {
		return nil
	}
	return b.Slots.Stepped(ctx, pool, backend, leases...)
}

// queued queues c (with a copy of its leases) for Run, and reports whether
// it did: Run runs and the queue has room.
func (b *batchedPrefilled) queued(c prefilledCall) bool {
	if !b.running.Load() {
		return false
	}
	c.leases = slices.Clone(c.leases)
	select {
	case b.queue <- c:
		return true
	default:
		return false
	}
}

// Run sends the queued calls until ctx ends, then what is still queued.
// Run it until the server has drained, as the streams call Prefilled until
// then.
func (b *batchedPrefilled) Run(ctx context.Context) {
	b.running.Store(true)
	for {
		select {
		case <-ctx.Done():
			b.running.Store(false)
			b.flush() // what queued before Prefilled saw Run stop
			return
		case c := <-b.queue:
			b.send(c)
		}
	}
}

// send makes call c with every call queued behind it, one store call per
// pool, backend and kind.
func (b *batchedPrefilled) send(c prefilledCall) {
	type key struct {
		pool, backend string
		stepped       bool
	}
	batch := map[key][]string{{c.pool, c.backend, c.stepped}: c.leases}
	for more := true; more; {
		select {
		case c := <-b.queue:
			k := key{c.pool, c.backend, c.stepped}
			batch[k] = append(batch[k], c.leases...)
		default:
			more = false
		}
	}
	for k, leases := range batch {
		ctx, cancel := context.WithTimeout(context.Background(), prefilledTimeout)
		var err error
		if k.stepped {
			err = b.Slots.Stepped(ctx, k.pool, k.backend, leases...)
		} else {
			err = b.Slots.Prefilled(ctx, k.pool, k.backend, leases...)
		}
		cancel()
		if err != nil && b.onErr != nil {
			b.onErr(err)
		}
	}
}

// flush sends whatever is queued now.
func (b *batchedPrefilled) flush() {
	select {
	case c := <-b.queue:
		b.send(c)
	default:
	}
}
