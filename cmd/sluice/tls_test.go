package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a certificate for 127.0.0.1 named cn, and its key, to
// certFile and keyFile.
func (ca *testCA) issue(t *testing.T, cn, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}

// servedName is the common name of the certificate addr presents.
func servedName(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// startTLSWorker serves a gpuworker over HTTPS with httptest's own
// certificate, whose CA it writes to a file for upstream.tls.ca_file.
func startTLSWorker(t *testing.T, model string) (url, caFile string) {
	t.Helper()
	srv := serveWorker(t, model, httptest.NewTLSServer)
	caFile = filepath.Join(t.TempDir(), "backend-ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv.URL, caFile
}

// TestServesTLSAndReloadsTheCertificate: with tls set, the OpenAI endpoint
// and the admin API serve HTTPS (the endpoint over HTTP/2 to a client that
// offers it, streams included, to the official client); an https://
// backend of a private CA is reached and scraped through upstream.tls's
// ca_file; a renewed certificate written over the files is served after
// a reload, and a broken one is refused with the running one kept.
func TestServesTLSAndReloadsTheCertificate(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	backend, backendCA := startTLSWorker(t, "m")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newTestCA(t)
	ca.issue(t, "sluice-first", certFile, keyFile)
	path := writeConfig(t, `listen: 127.0.0.1:0
tls:
  cert_file: `+certFile+`
  key_file: `+keyFile+`
admin:
  listen: 127.0.0.1:0
  tls:
    cert_file: `+certFile+`
    key_file: `+keyFile+`
upstream:
  tls:
    ca_file: `+backendCA+`
models:
  - name: m
    policy: round_robin
    backends:
      - url: `+backend+`
tiers:
  - name: t
    requests_per_minute: 6000
tenants:
  - name: acme
    tier: t
    api_keys: ["`+strings.TrimSpace(sha256Line("sk-acme"))+`"]
`)
	addr, reload, logs := serveInTest(t, serverOptions{path: path, drain: time.Second, watchEvery: 0})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	client := openai.NewClient(option.WithBaseURL("https://"+addr+"/v1/"), option.WithAPIKey("sk-acme"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc))

	answer, err := client.Chat.Completions.New(context.Background(), chatM(8))
	require.NoError(t, err, "a whole answer over HTTPS, from an https:// backend")
	assert.Positive(t, answer.Usage.CompletionTokens)
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatM(8))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err(), "a stream over HTTPS")
	require.NoError(t, stream.Close())
	assert.NotEmpty(t, acc.Choices[0].Message.Content)

	// HTTP/2 it is, and the errors Sluice writes itself go out over it.
	res, err := hc.Post("https://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, "HTTP/2.0", res.Proto)
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.Contains(t, string(body), `"invalid_api_key"`)
	// status sends a request with a bearer token and returns the answer's status.
	status := func(method, url, token string, body io.Reader) int {
		req, err := http.NewRequest(method, url, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := hc.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 11<<20) + `"}]}`
	assert.Equal(t, http.StatusRequestEntityTooLarge, status(http.MethodPost, "https://"+addr+"/v1/chat/completions", "sk-acme", strings.NewReader(big)),
		"a body past max_body_bytes, over HTTP/2")

	// The backend's metrics are scraped over its TLS too.
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `msg="backend metrics dialect detected" backend=`+backend)
	}, 5*time.Second, 5*time.Millisecond)

	admin := adminAddrOf(t, logs)
	assert.Equal(t, http.StatusOK, status(http.MethodGet, "https://"+admin+"/admin/backends", "admin-secret", nil), "the admin API over HTTPS")

	assert.Equal(t, "sluice-first", servedName(t, addr, ca.pool))
	ca.issue(t, "sluice-renewed", certFile, keyFile)
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "config reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "sluice-renewed", servedName(t, addr, ca.pool), "the renewed certificate, without a restart")
	assert.Equal(t, "sluice-renewed", servedName(t, admin, ca.pool))

	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "keeping the running config") }, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, logs.String(), "tls: "+certFile+" with "+keyFile)
	assert.Equal(t, "sluice-renewed", servedName(t, addr, ca.pool), "a broken key changes nothing")
	_, err = client.Chat.Completions.New(context.Background(), chatM(4))
	assert.NoError(t, err)
}

// TestARenewedCertificateReloadsByItself: with --watch, a certificate
// written over its file is served without a signal, as an edited config
// is reloaded.
func TestARenewedCertificateReloadsByItself(t *testing.T) {
	w := startWorker(t, "m")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newTestCA(t)
	ca.issue(t, "before", certFile, keyFile)
	path := writeConfig(t, "listen: 127.0.0.1:0\ntls:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+
		"\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: "+w.URL+"\n")
	addr, _, _ := serveInTest(t, serverOptions{path: path, drain: time.Second, watchEvery: 10 * time.Millisecond})
	assert.Equal(t, "before", servedName(t, addr, ca.pool))
	// A later modification time, whatever the file system's resolution.
	ca.issue(t, "after", certFile, keyFile)
	later := time.Now().Add(2 * time.Second)
	require.NoError(t, os.Chtimes(certFile, later, later))
	require.NoError(t, os.Chtimes(keyFile, later, later))
	require.Eventually(t, func() bool { return servedName(t, addr, ca.pool) == "after" }, 5*time.Second, 10*time.Millisecond)
}

// TestTLSFilesThatDoNotLoadStopTheStart: each error names the field of
// the file it is about.
func TestTLSFilesThatDoNotLoadStopTheStart(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	newTestCA(t).issue(t, "x", certFile, keyFile)
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	model := "scrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n"
	for _, c := range []struct{ config, want string }{
		{"tls:\n  cert_file: " + dir + "/missing.pem\n  key_file: " + keyFile + "\n", "tls.cert_file: open " + dir + "/missing.pem"},
		{"admin:\n  tls:\n    cert_file: " + certFile + "\n    key_file: " + dir + "/missing.pem\n", "admin.tls.key_file: open " + dir + "/missing.pem"},
		{"tls:\n  cert_file: " + certFile + "\n  key_file: " + notPEM + "\n", "tls: " + certFile + " with " + notPEM},
		{"upstream:\n  tls:\n    ca_file: " + notPEM + "\n", "upstream.tls.ca_file: " + notPEM + " holds no PEM certificate"},
	} {
		err := runServer(context.Background(), serverOptions{path: writeConfig(t, "listen: 127.0.0.1:0\n"+c.config+model),
			log: slog.New(slog.DiscardHandler)})
		require.Error(t, err, c.config)
		assert.Contains(t, err.Error(), c.want)
	}
}

func chatM(maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(maxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
}

// TestAdminAloneOverTLS: admin.tls without tls serves the admin API over
// HTTPS beside a plain-HTTP endpoint, and its certificate is logged (it
// was only when the endpoint served TLS too).
func TestAdminAloneOverTLS(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newTestCA(t)
	ca.issue(t, "admin-only", certFile, keyFile)
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: "+certFile+"\n    key_file: "+keyFile+
		"\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n")
	addr, _, logs := serveInTest(t, serverOptions{path: path, drain: time.Second})
	res, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the endpoint stays plain HTTP")
	assert.Equal(t, "admin-only", servedName(t, adminAddrOf(t, logs), ca.pool))
	// Made to last an hour: "expires within a week".
	assert.Contains(t, logs.String(), `msg="TLS certificate expires within a week" field=admin.tls subject="CN=admin-only"`)
}
