package main

import (
	"context"
	"os"
	"slices"
	"time"
)

// watcher polls the config file and reports when it changed (its size or
// modification time), so an edited file is reloaded as SIGHUP would.
// Polling needs no extra dependency and sees edits made by any means
// (editors that replace the file, Kubernetes ConfigMap symlink swaps).
type watcher struct {
	paths []string
	every time.Duration
	from  []fileStamp // each file as it was when it was read
}

// newWatcher returns a watcher of path that reports changes from the file
// as it is now: make it before reading the config. A watcher that stamped
// the file only once it ran could take an edit made after the server was
// ready for the file it started from, and never report it
// (TestEditedConfigIsReloaded failed that way under load).
func newWatcher(path string, every time.Duration) watcher {
	from, _ := stamp(path)
	return watcher{paths: []string{path}, every: every, from: []fileStamp{from}}
}

// and returns the watcher watching the non-empty paths too (the TLS
// certificates the config names), from the files as they are now: a
// renewed certificate reloads as an edited config does.
func (w watcher) and(paths ...string) watcher {
	w.paths, w.from = slices.Clone(w.paths), slices.Clone(w.from)
	for _, p := range paths {
		if p != "" && !slices.Contains(w.paths, p) {
			st, _ := stamp(p)
			w.paths, w.from = append(w.paths, p), append(w.from, st)
		}
	}
	return w
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
// whenever a file differs from when it last looked, until ctx ends.
func (w watcher) Run(ctx context.Context, changed chan<- struct{}) {
	last := slices.Clone(w.from)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			moved := false
			for i, p := range w.paths {
				now, ok := stamp(p)
				if !ok || now == last[i] {
					continue // a file being replaced may be missing for a moment
				}
				last[i], moved = now, true
			}
			if !moved {
				continue
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}
