package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-llm/sluice/configs"
)

// certificate is a listener's certificate, read from its files at start
// and again on every reload, so that a renewed certificate is served from
// the next handshake on without a restart.
type certificate struct {
	field string      // "tls" or "admin.tls", naming the files in errors
	files configs.TLS // as started: moving the files takes a restart
	cur   atomic.Pointer[tls.Certificate]
}

// newCertificate reads t's files; nil when t is off.
func newCertificate(field string, t configs.TLS) (*certificate, error) {
	if !t.On() {
		return nil, nil
	}
	c := &certificate{field: field, files: t}
	pair, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cur.Store(pair)
	return c, nil
}

// read loads the certificate and key, each error naming the field of the
// file it is about.
func (c *certificate) read() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.files.CertFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %w", c.field, err)
	}
	keyPEM, err := os.ReadFile(c.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.key_file: %w", c.field, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %s with %s: %w", c.field, c.files.CertFile, c.files.KeyFile, err)
	}
	return &pair, nil
}

// reload reads the files again; the caller swaps the result in with use
// once the rest of the reload has built, so a bad file changes nothing.
func (c *certificate) reload() (*tls.Certificate, error) {
	if c == nil {
		return nil, nil
	}
	return c.read()
}

// use serves pair from the next handshake on (nil: keep the one served).
func (c *certificate) use(pair *tls.Certificate) {
	if c != nil && pair != nil {
		c.cur.Store(pair)
	}
}

// logServed says which certificate the listener serves and warns when it
// is expired or within a week of expiring.
func (c *certificate) logServed(log *slog.Logger, now time.Time) {
	if c == nil {
		return
	}
	leaf := c.cur.Load().Leaf
	if leaf == nil {
		return
	}
	attrs := []any{"field", c.field, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
	switch {
	case now.After(leaf.NotAfter):
		log.Error("TLS certificate expired: clients will refuse it", attrs...)
	case leaf.NotAfter.Sub(now) < 7*24*time.Hour:
		log.Warn("TLS certificate expires within a week", attrs...)
	default:
		log.Info("serving TLS", attrs...)
	}
}

// serverConfig is the listener's TLS configuration: TLS 1.2 at least,
// HTTP/2 offered beside HTTP/1.1, the certificate read at each handshake
// from what the last reload loaded.
func (c *certificate) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load(), nil
		},
	}
}

// serve runs srv on ln until it stops: over TLS with c's certificate, or
// plain HTTP when c is nil.
func (c *certificate) serve(srv *http.Server, ln net.Listener) error {
	if c == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = c.serverConfig()
	return srv.ServeTLS(ln, "", "") // the certificate is srv.TLSConfig's
}

// upstreamTLS is the client TLS configuration for https:// backends and
// their metrics: the system's roots plus ca_file's, or none checked with
// insecure_skip_verify. Nil when neither is set (Go's defaults).
func upstreamTLS(u configs.UpstreamTLS) (*tls.Config, error) {
	if u.CAFile == "" && !u.InsecureSkipVerify {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: u.InsecureSkipVerify}
	if u.CAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(u.CAFile)
	if err != nil {
		return nil, fmt.Errorf("upstream.tls.ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots here: the file's alone
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("upstream.tls.ca_file: " + u.CAFile + " holds no PEM certificate")
	}
	cfg.RootCAs = pool
	return cfg, nil
}
