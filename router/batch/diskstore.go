package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DiskStore is the Store of a single replica: state in memory, written
// through to files under its directory so that a restart resumes where
// the last run stopped. Metadata is one JSON file per file and per batch,
// replaced atomically (write, then rename); each running batch has an
// append-only log of its results. Claims live in memory only: after a
// restart every unfinished line is pending again, so a line that was
// running when the process died runs once more (its first result is the
// one kept).
//
// Writes reach the operating system before a call returns but are not
// synced to the disk: a crash of the process loses nothing, a crash of
// the machine may lose the last results.
type DiskStore struct {
	dir string

	mu      sync.Mutex
	files   map[string]FileMeta
	batches map[string]BatchMeta
	lines   map[string]*diskLines
}

var _ Store = (*DiskStore)(nil)

// diskLines is one running batch's line progress.
type diskLines struct {
	n         int
	done      []bool
	completed int
	failed    int
	next      int   // the lowest line never handed out
	free      []int // lines handed out and given back (released or expired)
	claims    map[int]claim
	log       *os.File
}

type claim struct {
	holder string
	until  time.Time
}

// logHeader opens a results log; logEntry is each line after it.
type logHeader struct {
	Lines int `json:"lines"`
}

type logEntry struct {
	Line   int    `json:"line"`
	Result Result `json:"result"`
}

// OpenDiskStore opens (creating it if need be) the store under dir and
// loads what an earlier run left there.
func OpenDiskStore(dir string) (*DiskStore, error) {
	s := &DiskStore{dir: dir, files: map[string]FileMeta{}, batches: map[string]BatchMeta{},
		lines: map[string]*diskLines{}}
	for _, sub := range []string{"files", "batches"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("batch store: %w", err)
		}
	}
	if err := loadJSON(filepath.Join(dir, "files"), func(f FileMeta) { s.files[f.ID] = f }); err != nil {
		return nil, err
	}
	if err := loadJSON(filepath.Join(dir, "batches"), func(b BatchMeta) { s.batches[b.ID] = b }); err != nil {
		return nil, err
	}
	logs, err := filepath.Glob(filepath.Join(dir, "batches", "*.results"))
	if err != nil {
		return nil, err
	}
	for _, p := range logs {
		id := strings.TrimSuffix(filepath.Base(p), ".results")
		if b, ok := s.batches[id]; !ok || b.Status.Terminal() {
			_ = os.Remove(p) // a batch finished (or gone) before its log was removed
			continue
		}
		l, err := replay(p)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("batch store: %s: %w", p, err)
		}
		s.lines[id] = l
	}
	return s, nil
}

// Close closes the results logs. The store must not be used after.
func (s *DiskStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for id, l := range s.lines {
		errs = append(errs, l.log.Close())
		delete(s.lines, id)
	}
	return errors.Join(errs...)
}

func loadJSON[T any](dir string, add func(T)) error {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("batch store: %w", err)
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("batch store: %s: %w", p, err)
		}
		add(v)
	}
	return nil
}

// replay rebuilds a batch's progress from its results log. A last line
// cut short by a crash is dropped, and the log truncated before it.
func replay(path string) (*diskLines, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(f)
	head, err := r.ReadBytes('\n')
	var h logHeader
	if err != nil || json.Unmarshal(head, &h) != nil || h.Lines < 0 {
		_ = f.Close()
		return nil, errors.New("unreadable header")
	}
	l := newDiskLines(h.Lines, f)
	good := int64(len(head))
	for {
		b, err := r.ReadBytes('\n')
		if err != nil { // io.EOF, possibly after a partial line
			break
		}
		var e logEntry
		if json.Unmarshal(b, &e) != nil || e.Line < 0 || e.Line >= l.n {
			break
		}
		l.record(e.Line, e.Result)
		good += int64(len(b))
	}
	if err := f.Truncate(good); err != nil {
		_ = f.Close()
		return nil, err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	for l.next < l.n && l.done[l.next] {
		l.next++
	}
	return l, nil
}

func newDiskLines(n int, log *os.File) *diskLines {
	return &diskLines{n: n, done: make([]bool, n), claims: map[int]claim{}, log: log}
}

func (l *diskLines) record(line int, r Result) {
	l.done[line] = true
	if r.OK() {
		l.completed++
	} else {
		l.failed++
	}
}

// saveJSON replaces path with v, atomically.
func saveJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("batch store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("batch store: %w", err)
	}
	return nil
}

func (s *DiskStore) filePath(id string) string  { return filepath.Join(s.dir, "files", id+".json") }
func (s *DiskStore) batchPath(id string) string { return filepath.Join(s.dir, "batches", id+".json") }
func (s *DiskStore) logPath(id string) string   { return filepath.Join(s.dir, "batches", id+".results") }

// SaveFile implements Store.
func (s *DiskStore) SaveFile(_ context.Context, f FileMeta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := saveJSON(s.filePath(f.ID), f); err != nil {
		return err
	}
	s.files[f.ID] = f
	return nil
}

// File implements Store.
func (s *DiskStore) File(_ context.Context, id string) (FileMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[id]
	if !ok {
		return FileMeta{}, ErrNotFound
	}
	return f, nil
}

// Files implements Store.
func (s *DiskStore) Files(_ context.Context, owner string) ([]FileMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []FileMeta
	for _, f := range s.files {
		if f.Owner == owner {
			out = append(out, f)
		}
	}
	return out, nil
}

// DeleteFile implements Store.
func (s *DiskStore) DeleteFile(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[id]; !ok {
		return ErrNotFound
	}
	if err := os.Remove(s.filePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("batch store: %w", err)
	}
	delete(s.files, id)
	return nil
}

// ExpiredFiles implements Store.
func (s *DiskStore) ExpiredFiles(_ context.Context, now time.Time) ([]FileMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []FileMeta
	for _, f := range s.files {
		if f.expired(now) {
			out = append(out, f)
		}
	}
	return out, nil
}

// CreateBatch implements Store.
func (s *DiskStore) CreateBatch(_ context.Context, b BatchMeta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.batches[b.ID]; dup {
		return fmt.Errorf("batch store: batch %s exists", b.ID)
	}
	if err := saveJSON(s.batchPath(b.ID), b); err != nil {
		return err
	}
	s.batches[b.ID] = b.clone()
	return nil
}

// Batch implements Store.
func (s *DiskStore) Batch(_ context.Context, id string) (BatchMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batches[id]
	if !ok {
		return BatchMeta{}, ErrNotFound
	}
	return b.clone(), nil
}

// Batches implements Store.
func (s *DiskStore) Batches(_ context.Context, owner string) ([]BatchMeta, error) {
	return s.list(func(b BatchMeta) bool { return b.Owner == owner }), nil
}

// Active implements Store.
func (s *DiskStore) Active(context.Context) ([]BatchMeta, error) {
	return s.list(func(b BatchMeta) bool { return !b.Status.Terminal() }), nil
}

func (s *DiskStore) list(keep func(BatchMeta) bool) []BatchMeta {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []BatchMeta
	for _, b := range s.batches {
		if keep(b) {
			out = append(out, b.clone())
		}
	}
	return out
}

// UpdateBatch implements Store.
func (s *DiskStore) UpdateBatch(_ context.Context, id string, change func(*BatchMeta) error) (BatchMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batches[id]
	if !ok {
		return BatchMeta{}, ErrNotFound
	}
	b = b.clone()
	if err := change(&b); err != nil {
		return BatchMeta{}, err
	}
	if err := saveJSON(s.batchPath(id), b); err != nil {
		return BatchMeta{}, err
	}
	s.batches[id] = b
	return b.clone(), nil
}

// StartLines implements Store.
func (s *DiskStore) StartLines(_ context.Context, id string, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.batches[id]; !ok {
		return ErrNotFound
	}
	if _, started := s.lines[id]; started {
		return nil
	}
	f, err := os.OpenFile(s.logPath(id), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("batch store: %w", err)
	}
	head, _ := json.Marshal(logHeader{Lines: n})
	if _, err := f.Write(append(head, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("batch store: %w", err)
	}
	s.lines[id] = newDiskLines(n, f)
	return nil
}

// Claim implements Store.
func (s *DiskStore) Claim(_ context.Context, id, holder string, max int, ttl time.Duration, now time.Time) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok {
		return nil, nil
	}
	for line, c := range l.claims {
		if !c.until.After(now) {
			delete(l.claims, line)
			l.free = append(l.free, line)
		}
	}
	var out []int
	take := func(line int) {
		l.claims[line] = claim{holder: holder, until: now.Add(ttl)}
		out = append(out, line)
	}
	for len(out) < max && len(l.free) > 0 {
		line := l.free[0]
		l.free = l.free[1:]
		if _, held := l.claims[line]; !l.done[line] && !held {
			take(line)
		}
	}
	for len(out) < max && l.next < l.n {
		if !l.done[l.next] {
			take(l.next)
		}
		l.next++
	}
	return out, nil
}

// Renew implements Store.
func (s *DiskStore) Renew(_ context.Context, id, holder string, lines []int, ttl time.Duration, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok {
		return nil
	}
	for _, line := range lines {
		if c, held := l.claims[line]; held && c.holder == holder {
			l.claims[line] = claim{holder: holder, until: now.Add(ttl)}
		}
	}
	return nil
}

// Release implements Store.
func (s *DiskStore) Release(_ context.Context, id, holder string, line int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok {
		return nil
	}
	if c, held := l.claims[line]; held && c.holder == holder {
		delete(l.claims, line)
		l.free = append(l.free, line)
	}
	return nil
}

// Finish implements Store.
func (s *DiskStore) Finish(_ context.Context, id string, line int, r Result) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok || line < 0 || line >= l.n {
		return false, nil // the batch ended (or never ran): the result has no place
	}
	delete(l.claims, line)
	if l.done[line] {
		return false, nil
	}
	b, err := json.Marshal(logEntry{Line: line, Result: r})
	if err != nil {
		return false, err
	}
	if _, err := l.log.Write(append(b, '\n')); err != nil {
		return false, fmt.Errorf("batch store: %w", err)
	}
	l.record(line, r)
	return true, nil
}

// Counts implements Store.
func (s *DiskStore) Counts(_ context.Context, id string, now time.Time) (Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok {
		return Counts{}, nil
	}
	c := Counts{Total: l.n, Completed: l.completed, Failed: l.failed}
	for _, cl := range l.claims {
		if cl.until.After(now) {
			c.Claimed++
		}
	}
	return c, nil
}

// Results implements Store.
func (s *DiskStore) Results(_ context.Context, id string, fn func(int, Result) error) error {
	s.mu.Lock()
	l, ok := s.lines[id]
	var size int64
	if ok {
		st, err := l.log.Stat()
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("batch store: %w", err)
		}
		size = st.Size()
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	f, err := os.Open(s.logPath(id))
	if err != nil {
		return fmt.Errorf("batch store: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, size))
	sc.Buffer(nil, maxResultBytes+4096)
	sc.Scan() // the header
	for sc.Scan() {
		var e logEntry
		if err := json.Unmarshal(bytes.TrimSpace(sc.Bytes()), &e); err != nil {
			return fmt.Errorf("batch store: results of %s: %w", id, err)
		}
		if err := fn(e.Line, e.Result); err != nil {
			return err
		}
	}
	return sc.Err()
}

// DropLines implements Store.
func (s *DiskStore) DropLines(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lines[id]
	if !ok {
		return nil
	}
	delete(s.lines, id)
	err := l.log.Close()
	if rerr := os.Remove(s.logPath(id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}
