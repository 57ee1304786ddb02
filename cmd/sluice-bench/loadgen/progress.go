package loadgen

import (
	"fmt"
	"sync"
	"time"
)

// Progress is a point-in-time view of a run's counters.
type Progress struct {
	Sent, Done, Failed, InFlight int64
}

// Progress returns the current counters; safe to call while Run runs.
func (r *Runner) Progress() Progress {
	return Progress{
		Sent:     r.sent.Load(),
		Done:     r.done.Load(),
		Failed:   r.failed.Load(),
		InFlight: r.inFlight.Load(),
	}
}

// startProgress starts the progress printer, if one is configured, and
// returns a func that stops it, waits for it, and ends the line.
func (r *Runner) startProgress(start time.Time) (stop func()) {
	w := r.opts.Progress
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				r.printProgress(start)
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		r.printProgress(start)
		fmt.Fprintln(w)
	}
}

func (r *Runner) printProgress(start time.Time) {
	p := r.Progress()
	// Trailing spaces overwrite a longer previous line.
	fmt.Fprintf(r.opts.Progress, "\r%7.1fs  sent %d  done %d  failed %d  in-flight %d   ",
		time.Since(start).Seconds(), p.Sent, p.Done, p.Failed, p.InFlight)
}
