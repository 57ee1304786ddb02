package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every subcommand answers -h and --help with its usage and exit 0, as the
// flag package's convention goes.
func TestSubcommandHelp(t *testing.T) {
	for _, cmd := range []string{"load", "validate", "simulate", "summarize", "sweep", "bareproxy", "batch-file"} {
		for _, h := range []string{"-h", "--help"} {
			t.Run(cmd+" "+h, func(t *testing.T) {
				code, _, stderr := runCLI(t, cmd, h)
				assert.Equal(t, exitOK, code, stderr)
				assert.Contains(t, stderr, "Usage: sluice-bench "+cmd)
			})
		}
	}
}

// --mix says its shares are normalized: priority=0.3 alone makes every
// request priority, which "0.3" does not suggest.
func TestMixHelpSaysSharesAreNormalized(t *testing.T) {
	for _, cmd := range []string{"load", "simulate"} {
		_, _, stderr := runCLI(t, cmd, "-h")
		assert.Contains(t, stderr, "normalized to their sum, so priority=0.3 alone makes every request priority", cmd)
	}
}
