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
	last, _ := stamp(w.path)
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
