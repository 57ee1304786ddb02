package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Running out of file descriptors is the router's own limit, not an
// unreachable backend: it must not hold the backend out of routing.
func TestClassifyOwnLimitApartFromUnreachable(t *testing.T) {
	ctx := context.Background()
	emfile := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tt := range []struct {
		err  error
		want Outcome
	}{
		{emfile, LocalLimit},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.ENFILE)}, LocalLimit},
		{refused, Unreachable},
		{errors.New("EOF"), Failed},
	} {
		assert.Equal(t, tt.want, classify(ctx, tt.err), "%v", tt.err)
	}
}
