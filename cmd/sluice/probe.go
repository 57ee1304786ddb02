package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// probe GETs url and returns 0 when it answers 200 OK, 1 otherwise: the
// health check of the container image, which has no shell or curl
// (`sluice probe http://127.0.0.1:8080/readyz`).
func probe(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: sluice probe URL")
		return 2
	}
	c := &http.Client{Timeout: 3 * time.Second}
	res, err := c.Get(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "sluice probe:", err)
		return 1
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "sluice probe: %s: %s\n", args[0], res.Status)
		return 1
	}
	return 0
}
