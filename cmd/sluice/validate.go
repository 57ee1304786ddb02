package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/configs"
)

// validate loads a config and builds everything from it without serving,
// printing every problem with its field path.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file to check (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for
		}
		return 2
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first argument that is not a
		// flag: a stray word silently dropped every flag after it.
		fmt.Fprintf(stderr, "sluice validate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice validate: --config is required")
		return 2
	}
	errs, notes := splitNotes(loadAndBuild(*path))
	if len(errs) > 0 {
		fmt.Fprintf(stderr, "%s: invalid\n", *path)
		printErrors(stderr, errors.Join(errs...))
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	for _, n := range notes {
		fmt.Fprintf(stdout, "  note: %v (serve needs it)\n", n)
	}
	return 0
}

// loadAndBuild loads the config at path and builds what serve builds
// from it before it connects anywhere: the routing table, the Redis
// client's options, the Batch API's store choice.
func loadAndBuild(path string) error {
	c, err := configs.Load(path)
	if err != nil {
		return err
	}
	reg, err := newPolicyRegistry()
	if err != nil {
		return err
	}
	_, _, err = buildTable(c, reg, backends.NewRegistry(), nil, nil)
	errs := []error{err}
	if c.Limits.RedisURL != "" {
		// go-redis reads the URL's options (db, pool sizes, master_name,
		// ...) only here: one it does not know fails serve.
		client, err := redisClient(c.Limits.RedisURL, c.Limits.Timeout.Std())
		if err != nil {
			errs = append(errs, fmt.Errorf("limits.redis_url: %w", err))
		} else {
			_ = client.Close()
		}
	}
	errs = append(errs, checkTLSFiles(c)...)
	if c.Batch.Enabled && c.Batch.Store == "redis" && c.Limits.RedisURL == "" && os.Getenv("SLUICE_REDIS_URL") == "" {
		errs = append(errs, &envUnsetError{configs.FieldError{Field: "batch.store",
			Message: "redis needs limits.redis_url, --redis-url or SLUICE_REDIS_URL, and none is set here"}})
	}
	return errors.Join(errs...)
}

// splitNotes parts err's joined errors into problems and notes (settings
// that name what this environment does not set).
func splitNotes(err error) (errs, notes []error) {
	var walk func(error)
	walk = func(err error) {
		var unset *envUnsetError
		joined, isJoined := err.(interface{ Unwrap() []error })
		switch {
		case err == nil:
		case isJoined:
			for _, e := range joined.Unwrap() {
				walk(e)
			}
		case errors.As(err, &unset):
			notes = append(notes, err)
		default:
			errs = append(errs, err)
		}
	}
	walk(err)
	return errs, notes
}

// printErrors prints one line per joined error.
func printErrors(w io.Writer, err error) {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			printErrors(w, e)
		}
		return
	}
	fmt.Fprintf(w, "  - %v\n", err)
}

// checkTLSFiles loads the certificates and CA bundle the config names, as
// serve does at start: a file that is not here is a note (a config
// checked away from where it runs), one that does not load an error.
func checkTLSFiles(c *configs.Config) []error {
	var errs []error
	note := func(field, path string) {
		errs = append(errs, &envUnsetError{configs.FieldError{Field: field, Message: "no file " + path + " here"}})
	}
	for _, l := range []struct {
		field string
		tls   configs.TLS
	}{{"tls", c.TLS}, {"admin.tls", c.Admin.TLS}} {
		if !l.tls.On() {
			continue
		}
		missing := false
		for _, f := range []struct{ field, path string }{{".cert_file", l.tls.CertFile}, {".key_file", l.tls.KeyFile}} {
			if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
				note(l.field+f.field, f.path)
				missing = true
			}
		}
		if !missing {
			if _, err := newCertificate(l.field, l.tls); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if ca := c.Upstream.TLS.CAFile; ca != "" {
		if _, err := os.Stat(ca); errors.Is(err, fs.ErrNotExist) {
			note("upstream.tls.ca_file", ca)
		} else if _, err := upstreamTLS(c.Upstream.TLS); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
