package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probe GETs url and returns 0 when it answers 200 OK, 1 otherwise: the
// health check of the container image, which has no shell or curl
// (`sluice probe http://127.0.0.1:8080/readyz`). It parses its arguments
// as the other subcommands do, so -h prints its usage rather than being
// fetched as a URL.
func probe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: sluice probe [--insecure] URL\n\nGETs URL and exits 0 when it answers 200 OK, 1 otherwise (3s timeout).\n"+
			"--insecure accepts any certificate of an https:// URL: for a health check of Sluice's own TLS listener on 127.0.0.1,\n"+
			"whose certificate names the public host.\n")
	}
	insecure := fs.Bool("insecure", false, "accept any certificate of an https:// URL")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: sluice probe [--insecure] URL")
		return 2
	}
	target := fs.Arg(0)
	c := &http.Client{Timeout: 3 * time.Second}
	if *insecure {
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}
	}
	res, err := c.Get(target)
	if err != nil {
		fmt.Fprintln(stderr, "sluice probe:", err)
		return 1
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "sluice probe: %s: %s\n", target, res.Status)
		return 1
	}
	return 0
}
