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
	fs := flag.NewFlagSet("bareproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on")
	target := fs.String("target", "", "base URL to proxy to (required)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	u, err := url.Parse(*target)
	if *target == "" || err != nil || u.Host == "" {
		fmt.Fprintln(stderr, "sluice-bench bareproxy: --target must be a base URL, e.g. http://127.0.0.1:9001")
		return exitUsage
	}
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
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "sluice-bench bareproxy:", err)
		return exitError
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
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
