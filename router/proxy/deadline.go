package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrFirstByteTimeout is the cause of an attempt whose backend sent no
// response headers within the request's first-byte timeout
// (WithFirstByteTimeout). The attempt's outcome is Timeout: the backend
// may still be working, nothing reached the client, another may be tried.
var ErrFirstByteTimeout = errors.New("no response from the backend within the first-byte timeout")

// ErrTotalTimeout is the cause a caller gives the request's context when
// the request's whole time is up (context.WithTimeoutCause). Forward treats
// it as the request's own deadline, not the backend's fault: an attempt
// that had not started answering ends as ClientGone would, and a stream
// being relayed ends with an error event saying so.
var ErrTotalTimeout = errors.New("the request took longer than its total timeout")

type firstByteKey struct{}

// WithFirstByteTimeout returns ctx carrying d as the time Forward waits
// for a backend's response headers on each attempt made with it; zero or
// less means no limit beyond the transport's own.
func WithFirstByteTimeout(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, firstByteKey{}, d)
}

// firstByteTimer cancels an attempt's context with ErrFirstByteTimeout
// unless headers arrived first. Its zero value (no timeout) does nothing.
type firstByteTimer struct {
	mu      sync.Mutex
	arrived bool
	timer   *time.Timer
	cancel  context.CancelCauseFunc
}

// startFirstByte arms the timer that ctx asks for (WithFirstByteTimeout)
// and returns the attempt's context; stop releases it.
func (t *firstByteTimer) start(ctx context.Context) context.Context {
	d, _ := ctx.Value(firstByteKey{}).(time.Duration)
	if d <= 0 {
		return ctx
	}
	ctx, t.cancel = context.WithCancelCause(ctx)
	t.timer = time.AfterFunc(d, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.arrived {
			t.cancel(ErrFirstByteTimeout)
		}
	})
	return ctx
}

// headers records that the response headers arrived: the timer no longer
// cancels.
func (t *firstByteTimer) headers() {
	if t.timer == nil {
		return
	}
	t.mu.Lock()
	t.arrived = true
	t.mu.Unlock()
	t.timer.Stop()
}

// stop releases the timer and the attempt's context.
func (t *firstByteTimer) stop() {
	if t.timer == nil {
		return
	}
	t.timer.Stop()
	t.cancel(nil)
}
