// Command sluice-bench generates load against an OpenAI-compatible endpoint
// (a Sluice router, a gpuworker, or vLLM) and reports vLLM-style serving
// metrics.
//
// Usage:
//
//	sluice-bench load --target URL --model M --rate R --duration D [flags]
//
// Run "sluice-bench load -h" for every flag.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() { os.Exit(run()) }

// run wires the process to cli: arguments, standard streams and signals.
// The first SIGINT or SIGTERM stops the run and prints what completed; a
// second one kills the process.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	return cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// cli dispatches to a subcommand and returns the exit code.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "load":
		return loadCmd(ctx, args[1:], stdout, stderr)
	case "validate":
		return validateCmd(args[1:], stdout, stderr)
	case "simulate":
		return simulateCmd(ctx, args[1:], stdout, stderr)
	case "summarize":
		return summarizeCmd(args[1:], stdout, stderr)
	case "summarize-admission":
		return summarizeAdmissionCmd(args[1:], stdout, stderr)
	case "sweep":
		return sweepCmd(ctx, args[1:], stdout, stderr)
	case "bareproxy":
		return bareproxyCmd(ctx, args[1:], stdout, stderr)
	case "batch-file":
		return batchFileCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice-bench: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: sluice-bench <command> [flags]

Commands:
  load    send open-loop load to a live OpenAI-compatible endpoint and report
          TTFT, TPOT, ITL and end-to-end latency (vLLM benchmark_serving metrics)
  validate  run the simulated engine against published GPU benchmarks and
          print simulated vs published TTFT, ITL and throughput
  simulate  simulate a fleet in virtual time with Sluice's real routing policies
          and print the same report per policy
  summarize compare the default policy with the baselines, the reference and
          round_robin across "simulate --json" outputs
  summarize-admission  the service-class targets (priority's p99 growth, what
          was shed, flex's share of the spare, a light tenant's p99, the
          reference) from "simulate --admission --json" outputs
  sweep   run simulate (or, with --target, load) at a range of offered loads and
          write the latency-throughput curve per policy as a table, JSON and SVG
  bareproxy serve a bare httputil.ReverseProxy in front of one target: the Go
          floor "make bench-overhead" measures Sluice's cost against
  batch-file write a Batch API input file of requests drawn from a trace, for
          "simulate --batch" and a live Sluice's /v1/batches

Run "sluice-bench <command> -h" for the command's flags.
`)
}
