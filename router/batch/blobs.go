package batch

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// blobs keeps file contents, one file each under dir, written to a
// temporary name and renamed into place when whole.
type blobs struct{ dir string }

func (b blobs) path(id string) string { return filepath.Join(b.dir, id) }

// errTooLarge is a file over the size limit.
var errTooLarge = errors.New("batch: file too large")

// put stores r under id, at most limit bytes (errTooLarge beyond), and
// returns its size and its number of requests (lines that are not blank).
func (b blobs) put(id string, r io.Reader, limit int64) (size int64, lines int, err error) {
	tmp, err := os.CreateTemp(b.dir, ".upload-*")
	if err != nil {
		return 0, 0, &diskError{err: err}
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	c := &lineCounter{}
	dw := &diskWriter{w: tmp}
	w := bufio.NewWriterSize(io.MultiWriter(dw, c), 256<<10)
	size, err = io.Copy(w, io.LimitReader(r, limit+1))
	if err != nil {
		if dw.err != nil {
			return 0, 0, &diskError{err: dw.err}
		}
		return 0, 0, err
	}
	if size > limit {
		return 0, 0, errTooLarge
	}
	if err = w.Flush(); err != nil {
		return 0, 0, &diskError{err: err}
	}
	if err = tmp.Close(); err != nil {
		return 0, 0, &diskError{err: err}
	}
	if err = os.Rename(tmp.Name(), b.path(id)); err != nil {
		return 0, 0, &diskError{err: err}
	}
	return size, c.count(), nil
}

// diskError is a failure of the data directory, not of the client's
// upload.
type diskError struct{ err error }

func (e *diskError) Error() string { return "batch: data directory: " + e.err.Error() }
func (e *diskError) Unwrap() error { return e.err }

// diskWriter remembers its writer's error, to tell it from the reader's.
type diskWriter struct {
	w   io.Writer
	err error
}

func (d *diskWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	if err != nil {
		d.err = err
	}
	return n, err
}

// sweep removes temporary files last changed before cutoff.
func (b blobs) sweep(cutoff time.Time) {
	for _, pattern := range []string{".upload-*", ".write-*"} {
		paths, _ := filepath.Glob(filepath.Join(b.dir, pattern))
		for _, p := range paths {
			if st, err := os.Stat(p); err == nil && st.ModTime().Before(cutoff) {
				_ = os.Remove(p)
			}
		}
	}
}

func (b blobs) open(id string) (*os.File, error) { return os.Open(b.path(id)) }

func (b blobs) remove(id string) error {
	if err := os.Remove(b.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

// create starts writing the file id; commit puts it in place, abort drops
// it.
func (b blobs) create(id string) (*blobWriter, error) {
	tmp, err := os.CreateTemp(b.dir, ".write-*")
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	return &blobWriter{f: tmp, w: bufio.NewWriterSize(tmp, 256<<10), to: b.path(id)}, nil
}

type blobWriter struct {
	f    *os.File
	w    *bufio.Writer
	to   string
	size int64
	n    int
}

// line writes one line.
func (bw *blobWriter) line(b []byte) error {
	b = append(b, '\n')
	bw.size += int64(len(b))
	bw.n++
	_, err := bw.w.Write(b)
	return err
}

func (bw *blobWriter) commit() error {
	err := bw.w.Flush()
	if cerr := bw.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(bw.f.Name(), bw.to)
	}
	if err != nil {
		_ = os.Remove(bw.f.Name())
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

func (bw *blobWriter) abort() {
	_ = bw.f.Close()
	_ = os.Remove(bw.f.Name())
}

// lineCounter counts lines holding anything but blanks.
type lineCounter struct {
	lines   int
	content bool // the current line has a non-blank byte
}

func (c *lineCounter) Write(p []byte) (int, error) {
	for _, ch := range p {
		switch ch {
		case '\n':
			if c.content {
				c.lines++
			}
			c.content = false
		case ' ', '\t', '\r':
		default:
			c.content = true
		}
	}
	return len(p), nil
}

func (c *lineCounter) count() int {
	if c.content {
		return c.lines + 1
	}
	return c.lines
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return prefix + hex.EncodeToString(b[:])
}
