package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadBody(t *testing.T) {
	p, err := New(Options{Transport: http.DefaultTransport})
	require.NoError(t, err)
	big := strings.Repeat("0123456789", 300<<10/10) // grows the scratch past firstScratch several times
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"small", `{"model":"m"}`},
		{"exactly the first scratch", strings.Repeat("x", firstScratch)},
		{"large", big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second read reuses the pooled scratch
				got, err := p.ReadBody(iotest.HalfReader(strings.NewReader(tt.in)))
				require.NoError(t, err)
				assert.Equal(t, tt.in, string(got))
				assert.LessOrEqual(t, cap(got), len(got)+8<<10, "sized to the body (a size class), not to the scratch")
			}
		})
	}
	a, err := p.ReadBody(strings.NewReader("first"))
	require.NoError(t, err)
	_, err = p.ReadBody(strings.NewReader("second"))
	require.NoError(t, err)
	assert.Equal(t, "first", string(a), "a body does not share the scratch it was read into")

	boom := errors.New("boom")
	_, err = p.ReadBody(iotest.ErrReader(boom))
	assert.ErrorIs(t, err, boom)
	_, err = p.ReadBody(iotest.TimeoutReader(bytes.NewReader([]byte(big))))
	assert.ErrorIs(t, err, iotest.ErrTimeout)
}

// writeCounter is a connection that counts its writes.
type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// An attempt's request goes to the backend in one write, headers and body
// together: the transport flushes the headers on their own for a body it
// does not know to be in memory, which costs a syscall and a segment per
// request and has the backend read twice.
func TestRequestSentInOneWrite(t *testing.T) {
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)

	var writes atomic.Int32
	tr := NewTransport(TransportOptions{})
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := New(Options{Transport: tr})
	require.NoError(t, err)

	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for i := range 3 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		require.NoError(t, p.Forward(rec, req, Attempt{Target: target, Body: body}))
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, string(body), string(<-got))
		assert.EqualValues(t, i+1, writes.Load(), "request %d", i)
	}
}
