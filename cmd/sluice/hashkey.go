package main

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// generatedKeyPrefix starts every key that hash-key --generate makes.
const generatedKeyPrefix = "sk-sluice-"

// hashKey prints the api_keys line for a key: "sha256:<hex>". The key is
// the argument, or else the first line of stdin (trimmed), so it need not
// enter the shell's history. With --generate it makes a new random key and
// prints it on one line and its hash on the next.
func hashKey(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hash-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	generate := fs.Bool("generate", false, "make a new random key and print it, then its hash")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for
		}
		return 2
	}
	if fs.NArg() > 1 || (*generate && fs.NArg() > 0) {
		fmt.Fprintf(stderr, "sluice hash-key: want one KEY, the key on stdin, or --generate\n%s", usage)
		return 2
	}
	var key string
	switch {
	case *generate:
		k, err := newKey()
		if err != nil {
			fmt.Fprintf(stderr, "sluice hash-key: %v\n", err)
			return 1
		}
		key = k
		fmt.Fprintln(stdout, key)
		fmt.Fprintln(stderr, "sluice hash-key: give the key (first line) to the tenant; put the sha256 line in its api_keys")
	case fs.NArg() == 1:
		key = strings.TrimSpace(fs.Arg(0)) // as the server reads a key, and stdin's
	default:
		k, err := readKey(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "sluice hash-key: %v\n", err)
			return 1
		}
		key = k
	}
	if key == "" {
		fmt.Fprintln(stderr, "sluice hash-key: the key is empty")
		return 1
	}
	fmt.Fprintln(stdout, keyHashLine(key))
	return 0
}

// keyHashLine is how a key's hash is written in a tenant's api_keys.
func keyHashLine(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:])
}

// newKey returns "sk-sluice-" and 32 URL-safe characters (192 random bits).
func newKey() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random key: %w", err)
	}
	return generatedKeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// readKey returns the first line of r without surrounding white space.
func readKey(r io.Reader) (string, error) {
	s := bufio.NewScanner(r)
	if !s.Scan() {
		if err := s.Err(); err != nil {
			return "", fmt.Errorf("read the key from stdin: %w", err)
		}
		return "", errors.New("no key on stdin (give it as an argument, on stdin, or use --generate)")
	}
	return strings.TrimSpace(s.Text()), nil
}
