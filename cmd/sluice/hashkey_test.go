package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sha256Line(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:]) + "\n"
}

func TestHashKeyArgument(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"hash-key", "sk-demo-free"}, &out, &errOut), errOut.String())
	assert.Equal(t, sha256Line("sk-demo-free"), out.String())
	assert.Equal(t, "sha256:e47e4ba5a43e2315c5dacac8bb11b346f061d4cd69e59ec04cc41ac3971fc825\n", out.String(),
		"the hash configs/demo.yaml lists for sk-demo-free")
	assert.Empty(t, errOut.String())
}

func TestHashKeyStdin(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		code  int
		out   string
		err   string
	}{
		{"one line", "sk-demo-pro\n", 0, sha256Line("sk-demo-pro"), ""},
		{"trimmed", "  sk-demo-pro \r\n", 0, sha256Line("sk-demo-pro"), ""},
		{"no newline", "sk-demo-pro", 0, sha256Line("sk-demo-pro"), ""},
		{"only the first line", "sk-demo-pro\nsk-other\n", 0, sha256Line("sk-demo-pro"), ""},
		{"empty stdin", "", 1, "", "no key on stdin"},
		{"blank line", "   \n", 1, "", "the key is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, tt.code, hashKey(nil, strings.NewReader(tt.stdin), &out, &errOut))
			assert.Equal(t, tt.out, out.String())
			assert.Contains(t, errOut.String(), tt.err)
		})
	}
}

func TestHashKeyGenerate(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"hash-key", "--generate"}, &out, &errOut), errOut.String())
	lines := strings.SplitAfter(out.String(), "\n")
	require.Len(t, lines, 3, out.String()) // key, hash, and "" after the last newline
	key := strings.TrimSuffix(lines[0], "\n")
	require.True(t, strings.HasPrefix(key, "sk-sluice-"), key)
	random := strings.TrimPrefix(key, "sk-sluice-")
	assert.Len(t, random, 32)
	assert.Equal(t, -1, strings.IndexFunc(random, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}), "URL-safe characters only: %s", random)
	assert.Equal(t, sha256Line(key), lines[1])

	var again bytes.Buffer
	require.Equal(t, 0, run([]string{"hash-key", "--generate"}, &again, &errOut))
	assert.NotEqual(t, out.String(), again.String(), "every key is new")
}

func TestHashKeyUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"two keys", []string{"hash-key", "a", "b"}},
		{"a key and --generate", []string{"hash-key", "--generate", "a"}},
		{"unknown flag", []string{"hash-key", "--length", "9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, 2, run(tt.args, &out, &errOut))
			assert.Empty(t, out.String())
		})
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"help"}, &out, &errOut))
	assert.Contains(t, out.String(), "sluice hash-key")
}

// TestCommandLineArguments: --help is asked for (exit 0), a stray word
// is refused (it made the flag package drop every flag after it: serve
// listened on the file's address, not --listen's), and a key given as an
// argument is trimmed as the server trims the keys it reads.
func TestCommandLineArguments(t *testing.T) {
	path := writeConfig(t, "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n")
	for _, tt := range []struct {
		args []string
		want int
		err  string
	}{
		{[]string{"serve", "--help"}, 0, "-config"},
		{[]string{"validate", "--help"}, 0, "-config"},
		{[]string{"hash-key", "--help"}, 0, "-generate"},
		{[]string{"serve", "--config", path, "oops", "--listen", "127.0.0.1:0"}, 2, `unexpected argument "oops"`},
		{[]string{"validate", "--config", path, "extra"}, 2, `unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, tt.want, run(tt.args, &out, &errOut), "%v", tt.args)
		assert.Contains(t, errOut.String(), tt.err, "%v", tt.args)
	}
	var spaced, plain bytes.Buffer
	require.Equal(t, 0, hashKey([]string{" sk-demo-free\n"}, strings.NewReader(""), &spaced, io.Discard))
	require.Equal(t, 0, hashKey([]string{"sk-demo-free"}, strings.NewReader(""), &plain, io.Discard))
	assert.Equal(t, plain.String(), spaced.String())
}
