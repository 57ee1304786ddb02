package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

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
	if err := loadAndBuild(*path); err != nil {
		fmt.Fprintf(stderr, "%s: invalid\n", *path)
		printErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return 0
}

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
	return err
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
