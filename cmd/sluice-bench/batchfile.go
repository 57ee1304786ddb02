package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// batchFileCmd runs "sluice-bench batch-file": a Batch API input file
// whose lines are requests drawn from a trace.
func batchFileCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench batch-file", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trace := fs.String("trace", "", "draw the lines' sizes from this trace `file` (Azure CSV or Mooncake JSONL; required)")
	lines := fs.Int("lines", 2000, "lines to write")
	seed := fs.Uint64("seed", 7, "seed of the draw and of the prompts' text")
	model := fs.String("model", "bench-model", "the lines' model")
	out := fs.String("out", "", "write to this `file` instead of standard output")
	csvOut := fs.String("csv", "", "also write the same rows to this `file` as an Azure trace (10 ms apart), for sending them as ordinary traffic with \"load --trace\"")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench batch-file --trace FILE [--lines N] [--seed S] [--model M] [--out FILE] [--csv FILE]

Writes a Batch API input file (JSONL {custom_id, method, url, body}) of N
chat requests whose prompt and output sizes are rows of the trace drawn at
random (seeded): one user message of random hex text that a gpuworker counts
as the row's prompt tokens, max_tokens the row's output and ignore_eos, so a
worker generates exactly that many tokens. "simulate --batch" and a live
Sluice (POST /v1/files, POST /v1/batches) take the same file.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	if *trace == "" || *lines < 1 {
		fmt.Fprintln(stderr, "sluice-bench batch-file: --trace is required and --lines must be at least 1")
		return exitUsage
	}
	reqs, err := readTrace(*trace, "")
	if err == nil && len(reqs) == 0 {
		err = errors.New("the trace has no requests")
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
		return exitError
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
			return exitError
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var cw *bufio.Writer
	if *csvOut != "" {
		f, err := os.Create(*csvOut)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
			return exitError
		}
		defer f.Close()
		cw = bufio.NewWriter(f)
		fmt.Fprintln(cw, "TIMESTAMP,ContextTokens,GeneratedTokens")
	}
	rng := rand.New(rand.NewPCG(*seed, 0xba7c4))
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type body struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		IgnoreEOS bool      `json:"ignore_eos"`
	}
	type line struct {
		CustomID string `json:"custom_id"`
		Method   string `json:"method"`
		URL      string `json:"url"`
		Body     body   `json:"body"`
	}
	enc := json.NewEncoder(bw)
	var raw []byte
	for i := range *lines {
		r := reqs[rng.IntN(len(reqs))]
		// CountChatTokens: bytes/4, plus ChatTokensPerMessage per message.
		n := max(1, r.PromptTokens-gpuworker.ChatTokensPerMessage) * 4
		if cap(raw) < n/2 {
			raw = make([]byte, n/2)
		}
		raw = raw[:n/2]
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		l := line{CustomID: fmt.Sprintf("req-%d", i), Method: "POST", URL: "/v1/chat/completions",
			Body: body{Model: *model, Messages: []message{{Role: "user", Content: hex.EncodeToString(raw)}}, MaxTokens: max(1, r.OutputTokens), IgnoreEOS: true}}
		if err := enc.Encode(l); err != nil {
			fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
			return exitError
		}
		if cw != nil {
			at := time.Date(2023, 11, 16, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * 10 * time.Millisecond)
			fmt.Fprintf(cw, "%s,%d,%d\n", at.Format("2006-01-02 15:04:05.0000000"), max(gpuworker.ChatTokensPerMessage+1, r.PromptTokens), l.Body.MaxTokens)
		}
	}
	if cw != nil {
		if err := cw.Flush(); err != nil {
			fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
			return exitError
		}
	}
	if err := bw.Flush(); err != nil {
		fmt.Fprintf(stderr, "sluice-bench batch-file: %v\n", err)
		return exitError
	}
	return exitOK
}
