package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseArgs parses a subcommand's flags and rejects positional arguments.
// The flag set is named "sluice-bench CMD". It returns done=true with the exit code when the command must stop here:
// exitOK after -h, exitUsage for a bad flag or a stray argument.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, true
	}
	return 0, false
}
