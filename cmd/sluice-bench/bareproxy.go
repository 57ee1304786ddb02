package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// bareproxyCmd serves a bare httputil.ReverseProxy in front of one target:
// the Go floor Sluice's per-request cost is measured against (make
// bench-overhead). It does what any Go proxy must (one keep-alive pool,
// flushing events as they arrive) and nothing Sluice adds (no parsing,
// tenants, limits, admission, routing, metrics or tracing).
func bareproxyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench bareproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench bareproxy --target URL [--listen ADDR]

Serves a bare httputil.ReverseProxy in front of one target until
interrupted: the Go floor "make bench-overhead" measures Sluice's cost
against.

Flags:
`)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on")
	target := fs.String("target", "", "base `URL` to proxy to (required)")
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	u, err := url.Parse(*target)
	if *target == "" || err != nil || u.Host == "" {
		fmt.Fprintln(stderr, "sluice-bench bareproxy: --target must be a base URL, e.g. http://127.0.0.1:9001")
		return exitUsage
	}
	h, tr := newBareProxy(u)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "sluice-bench bareproxy:", err)
		return exitError
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "bareproxy on %s -> %s\n", ln.Addr(), u)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		fmt.Fprintln(stderr, "sluice-bench bareproxy:", err)
		return exitError
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		fmt.Fprintln(stderr, "sluice-bench bareproxy:", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "sluice-bench bareproxy:", err)
	}
	tr.CloseIdleConnections()
	return exitOK
}

// newBareProxy is the bare proxy's handler in front of u and its transport.
//
// The handler turns on full duplex before proxying. Without it Go's HTTP/1
// server, when a handler first writes its answer, reads what is left of the
// request body and closes it, and the transport copying that body upstream
// may not yet have read its end: its next read fails, the transport closes
// the upstream connection, and the stream being relayed over it breaks ("use
// of closed network connection" at the proxy, an unexpected EOF at the
// client). It did to 45 of 2,000 streams at concurrency 1 in front of an
// instant gpuworker, and to about 3% of them in every make bench-overhead
// run before this. Sluice reads a request's body whole before it sends it
// on, so it never hit this.
func newBareProxy(u *url.URL) (http.Handler, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
		Transport:     tr,
		FlushInterval: -1, // flush every write, as a stream needs
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/1 only; see above
		rp.ServeHTTP(w, r)
	}), tr
}
