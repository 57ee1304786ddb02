package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/router/admin"
)

// serveAdmin starts the admin API and its status page on their own
// listener when the token is set, and returns the function that stops
// them (nil when they are off). The status page's sampler runs only
// while the admin listener does.
func serveAdmin(c *configs.Config, live *runtime, log *slog.Logger) (func(), error) {
	token := os.Getenv(c.Admin.TokenEnv)
	if token == "" {
		log.Info("admin API off: set " + c.Admin.TokenEnv + " to a token to serve it on " + c.Admin.Listen)
		return nil, nil
	}
	mon, err := admin.NewMonitor(live, admin.MonitorOptions{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	srv := &http.Server{Handler: admin.Handler(live, token, mon), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	mctx, stopMonitor := context.WithCancel(context.Background())
	sampled := make(chan error, 1)
	go func() { sampled <- mon.Run(mctx) }()
	done := make(chan error, 1)
	go func() { done <- live.adminCert.serve(srv, ln) }()
	log.Info("admin API listening", "addr", ln.Addr().String(), "status_page", "/status", "tls", live.adminCert != nil)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			log.Warn("admin API stopped", "err", err)
		}
		stopMonitor()
		<-sampled
	}, nil
}
