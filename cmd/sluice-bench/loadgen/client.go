package loadgen

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
)

// maxErrorBody bounds how much of an error response is quoted.
const maxErrorBody = 512

// NewTransport returns a Transport tuned for many concurrent requests to one
// host: enough idle connections that no request waits for a handshake, no
// compression (SSE chunks must arrive as sent), and HTTP/1.1 like the
// engines it measures.
func NewTransport(maxConns int) *http.Transport {
	if maxConns <= 0 {
		maxConns = 1024
	}
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0,
		ForceAttemptHTTP2:     false,
	}
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model         string         `json:"model"`
	Prompt        []int          `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	// User names the request's conversation, so a router can keep a
	// conversation on one worker; empty for requests without one.
	User string `json:"user,omitempty"`
	// ServiceTier is the request's service class, as OpenAI names it
	// (priority, default, flex); empty omits the field.
	ServiceTier string `json:"service_tier,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionChunk is the part of a completion (or one SSE chunk of it) the
// benchmark reads.
type completionChunk struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// hasText reports whether the chunk carries generated text, which is what
// makes it a token chunk for TTFT and ITL.
func (c *completionChunk) hasText() bool {
	for _, ch := range c.Choices {
		if ch.Text != "" {
			return true
		}
	}
	return false
}

// sender sends one request and measures it.
type sender struct {
	client *http.Client
	url    string
	urls   []string // every target's URL, url first; one when a single target
	model  string
	stream bool
	// authorization is the Authorization header value; empty sends none.
	authorization string
}

// call is what varies between the requests one sender sends.
type call struct {
	prompt    []int
	maxTokens int
	// user and tier are the "user" and "service_tier" fields, omitted
	// when empty; authorization overrides the sender's when not empty.
	user, tier, authorization string
	// target indexes the sender's urls (request i goes to i mod their
	// number: several router replicas share the load).
	target int
}

// send posts one completion and returns its sample. A cancelled ctx gives
// a Cancelled sample.
func (s *sender) send(ctx context.Context, c call) report.Sample {
	prompt := c.prompt
	sample := report.Sample{PromptTokens: len(prompt)}
	body := completionRequest{Model: s.model, Prompt: prompt, MaxTokens: c.maxTokens, IgnoreEOS: true, User: c.user, ServiceTier: c.tier}
	if s.stream {
		body.Stream = true
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	buf, err := json.Marshal(body)
	if err != nil {
		sample.Err = fmt.Sprintf("encode request: %v", err)
		return sample
	}
	url := s.url
	if c.target > 0 && c.target < len(s.urls) {
		url = s.urls[c.target]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(buf))
	if err != nil {
		sample.Err = fmt.Sprintf("build request: %v", err)
		return sample
	}
	req.Header.Set("Content-Type", "application/json")
	if auth := cmp.Or(c.authorization, s.authorization); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if s.stream {
		req.Header.Set("Accept", "text/event-stream")
	}

	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return failed(ctx, sample, err)
	}
	defer func() {
		// Drain what is left (usually nothing) so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		sample.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		return sample
	}
	if s.stream {
		err = readStream(resp.Body, start, &sample)
	} else {
		err = readWhole(resp.Body, start, &sample)
	}
	if err != nil {
		return failed(ctx, sample, err)
	}
	sample.OK = true
	return sample
}

// failed marks sample as cancelled when ctx ended, else as failed with err.
func failed(ctx context.Context, sample report.Sample, err error) report.Sample {
	if ctx.Err() != nil {
		sample.Cancelled = true
		return sample
	}
	sample.Err = err.Error()
	return sample
}

// readWhole reads a non-streaming completion; TTFT is the full latency.
func readWhole(body io.Reader, start time.Time, sample *report.Sample) error {
	var c completionChunk
	if err := json.NewDecoder(body).Decode(&c); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	sample.E2E = time.Since(start)
	sample.TTFT = sample.E2E
	if c.Error != nil {
		return fmt.Errorf("server error: %s", c.Error.Message)
	}
	if c.Usage == nil {
		return errors.New("response has no usage")
	}
	sample.OutputTokens = c.Usage.CompletionTokens
	return nil
}

// readStream reads an SSE completion stream, timestamping each event as its
// first data line arrives. Output tokens come from the usage chunk, or from
// the number of token chunks when the server sends no usage.
func readStream(body io.Reader, start time.Time, sample *report.Sample) error {
	br := bufio.NewReaderSize(body, 32<<10)
	var (
		data      []byte
		eventAt   time.Time
		last      time.Time
		chunks    int
		usage     = -1
		done      bool
		lineBytes []byte
	)
	dispatch := func() error {
		if len(data) == 0 {
			return nil
		}
		defer func() { data = data[:0] }()
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			return nil
		}
		var c completionChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("decode stream chunk: %w", err)
		}
		if c.Error != nil {
			return fmt.Errorf("server error in stream: %s", c.Error.Message)
		}
		if c.Usage != nil {
			usage = c.Usage.CompletionTokens
		}
		if !c.hasText() {
			return nil
		}
		if chunks == 0 {
			sample.TTFT = eventAt.Sub(start)
		} else {
			sample.ITL = append(sample.ITL, eventAt.Sub(last))
		}
		last = eventAt
		chunks++
		return nil
	}
	for !done {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			lineBytes = append(lineBytes[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				lineBytes = append(lineBytes, line...)
			}
			line = lineBytes
		}
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			switch {
			case len(line) == 0:
				if derr := dispatch(); derr != nil {
					return derr
				}
			case bytes.HasPrefix(line, []byte("data:")):
				if len(data) == 0 {
					eventAt = time.Now()
				} else {
					data = append(data, '\n')
				}
				v := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
				data = append(data, v...)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("read stream: %w", err)
			}
			if derr := dispatch(); derr != nil {
				return derr
			}
			break
		}
	}
	sample.E2E = time.Since(start)
	if !done {
		return errors.New("stream ended without [DONE]")
	}
	if chunks == 0 {
		return errors.New("stream carried no tokens")
	}
	sample.OutputTokens = chunks
	if usage >= 0 {
		sample.OutputTokens = usage
	}
	return nil
}
