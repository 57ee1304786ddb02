package main

import (
	"context"
	"os"
	"time"
)

// watcher polls the config file and reports when it changed (its size or
// modification time), so an edited file is reloaded as SIGHUP would.
// Polling needs no extra dependency and sees edits made by any means
// (editors that replace the file, Kubernetes ConfigMap symlink swaps).
type watcher struct {
	path  string
	every time.Duration
	from  fileStamp // the file as it was when the config was read
}

// newWatcher returns a watcher of path that reports changes from the file
// as it is now: make it before reading the config. A watcher that stamped
// the file only once it ran could take an edit made after the server was
// ready for the file it started from, and never report it
// (TestEditedConfigIsReloaded failed that way under load).
func newWatcher(path string, every time.Duration) watcher {
	from, _ := stamp(path)
	return watcher{path: path, every: every, from: from}
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func stamp(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	return fileStamp{size: fi.Size(), mod: fi.ModTime()}, true
}

// Run sends on changed (without blocking: one pending change is enough)
// whenever the file differs from when it last looked, until ctx ends.
func (w watcher) Run(ctx context.Context, changed chan<- struct{}) {
	last := w.from
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now, ok := stamp(w.path)
			if !ok || now == last {
				continue // a file being replaced may be missing for a moment
			}
			last = now
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}
