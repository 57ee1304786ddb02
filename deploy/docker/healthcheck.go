//go:build ignore

// Healthcheck GETs a URL and exits 0 when the answer is 200 OK, 1 otherwise.
// The image is distroless (no shell, no curl), so Compose and Docker
// healthchecks run this instead:
//
//	healthcheck http://127.0.0.1:8080/readyz
//
// deploy/docker/Dockerfile builds it by file name; the build constraint
// keeps it out of the module's packages (deploy holds no packages).
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL")
		return 2
	}
	c := &http.Client{Timeout: 3 * time.Second}
	res, err := c.Get(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "healthcheck: %s: %s\n", args[0], res.Status)
		return 1
	}
	return 0
}
