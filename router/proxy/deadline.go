package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrFirstByteTimeout is the cause of an attempt whose backend sent no
// response headers within its first-byte timeout
// (Attempt.FirstByteTimeout). The attempt's outcome is Timeout: the backend
// may still be working, nothing reached the client, another may be tried.
var ErrFirstByteTimeout = errors.New("no response from the backend within the first-byte timeout")

// ErrTotalTimeout is the cause a caller gives the request's context when
// the request's whole time is up (context.WithTimeoutCause). Forward treats
// it as the request's own deadline, not the backend's fault: an attempt
// that had not started answering ends as ClientGone would, and a stream
// being relayed ends with an error event saying so.
var ErrTotalTimeout = errors.New("the request took longer than its total timeout")

// firstByteTimer cancels an attempt's context with ErrFirstByteTimeout
// unless headers arrived first. Its zero value (no timeout) does nothing.
type firstByteTimer struct {
	state  atomic.Int32 // fbWaiting, then fbArrived or fbFired, whichever came first
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

const (
	fbWaiting = iota
	fbArrived
	fbFired
)

// start arms the timer for d (none for d <= 0) and returns the attempt's
// context; stop releases it.
func (t *firstByteTimer) start(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	ctx, t.cancel = context.WithCancelCause(ctx)
	t.timer = time.AfterFunc(d, t.fire)
	return ctx
}

func (t *firstByteTimer) fire() {
	if t.state.CompareAndSwap(fbWaiting, fbFired) {
		t.cancel(ErrFirstByteTimeout)
	}
}

// headers records that the response headers arrived: the timer no longer
// cancels.
func (t *firstByteTimer) headers() {
	if t.timer == nil {
		return
	}
	t.state.CompareAndSwap(fbWaiting, fbArrived)
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
