// Command sluice is the Sluice router: one OpenAI-compatible endpoint in
// front of a fleet of inference backends.
//
//	sluice serve --config FILE [--listen ADDR]
//	sluice validate --config FILE
//	sluice hash-key [KEY | --generate]
//	sluice probe URL
package main

import (
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage:
  sluice serve --config FILE [--listen ADDR] [--log-level LEVEL]
  sluice validate --config FILE
  sluice hash-key [KEY]      print a tenant's api_keys line (sha256:<hex>) for KEY, or for the key on stdin
  sluice hash-key --generate make a new random key; print it, then its api_keys line
  sluice probe URL           exit 0 when URL answers 200 (the container image's health check)
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "hash-key":
		return hashKey(args[1:], os.Stdin, stdout, stderr)
	case "probe":
		return probe(args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n%s", args[0], usage)
		return 2
	}
}
