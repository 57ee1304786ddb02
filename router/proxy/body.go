package proxy

import (
	"bytes"
	"io"
	"slices"
	"sync"
)

const (
	// firstScratch is a new scratch buffer's size: most chat bodies fit.
	firstScratch = 16 << 10
	// maxScratch bounds the scratch buffers kept for reuse; a larger body
	// grows one that is dropped afterwards.
	maxScratch = 1 << 20
)

// scratchPool keeps the buffers ReadBody reads into.
type scratchPool struct{ pool sync.Pool }

func (s *scratchPool) get() []byte {
	if b, ok := s.pool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, firstScratch)
}

func (s *scratchPool) put(b []byte) {
	if cap(b) <= maxScratch {
		b = b[:0]
		s.pool.Put(&b)
	}
}

// ReadBody reads r to its end and returns what it read in a new slice of
// exactly that length. The bytes arrive in a pooled scratch buffer that
// grows (doubling) with what arrives, never from a declared
// Content-Length, so a client that declares 10 MiB and sends one byte a
// second holds a few bytes. The copy out is the one allocation: reading a
// 200 KB prompt with io.ReadAll allocated its chunks and then the result,
// about 2.2 times the body, and that garbage made Go's collector run every
// few requests (issue 12). The result is not pooled: it goes upstream, and
// the transport may still read a request body after RoundTrip returns.
func (p *Proxy) ReadBody(r io.Reader) ([]byte, error) {
	buf := p.scratch.get()
	defer func() { p.scratch.put(buf) }()
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return bytes.Clone(buf), nil
		}
		if err != nil {
			return nil, err
		}
	}
}
