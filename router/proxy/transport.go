package proxy

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// TransportOptions tunes the upstream HTTP transport. Zero fields mean the
// documented defaults.
type TransportOptions struct {
	// DialTimeout bounds connecting to a backend. Default 2s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers (time to
	// first byte for a stream). Default 60s; negative means none.
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool per backend. Default 256.
	MaxIdleConnsPerHost int
	// TLS verifies https:// backends. Default nil: Go's (the system's roots).
	TLS *tls.Config
}

// NewTransport returns an HTTP/1.1 transport tuned for many concurrent,
// long-lived requests to a small set of backends.
func NewTransport(o TransportOptions) *http.Transport {
	if o.DialTimeout == 0 {
		o.DialTimeout = 2 * time.Second
	}
	switch {
	case o.ResponseHeaderTimeout == 0:
		o.ResponseHeaderTimeout = 60 * time.Second
	case o.ResponseHeaderTimeout < 0:
		o.ResponseHeaderTimeout = 0 // none: the caller times attempts (Attempt.FirstByteTimeout)
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = 256
	}
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil, // backends are reached directly, never through HTTP_PROXY
		DialContext:           d.DialContext,
		MaxIdleConns:          0, // no global cap; the per-host cap bounds it
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true, // pass the client's Accept-Encoding and the body through untouched
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       o.TLS,
		TLSHandshakeTimeout:   o.DialTimeout,
	}
}
