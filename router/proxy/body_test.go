package proxy

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
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
