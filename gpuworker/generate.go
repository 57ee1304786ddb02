package gpuworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Finish reasons.
const (
	finishStop   = "stop"
	finishLength = "length"
)

// apiKind is the API a generation answers in.
type apiKind uint8

const (
	apiCompletions apiKind = iota // /v1/completions
	apiChat                       // /v1/chat/completions
	apiResponses                  // /v1/responses
)

// generation is one chat, completion or response request on its way
// through the engine.
type generation struct {
	api     apiKind
	chat    bool // api == apiChat
	id      string
	created int64
	params  genParams
	n       int // choices per prompt
	job     *job

	latch      *crashLatch // the worker's crash latch when the request arrived
	stallAfter int         // Faults.StallAfter when the request arrived
}

func (c choice) finishReason() string {
	if c.target >= c.max {
		return finishLength
	}
	return finishStop
}

func (c choice) text() string {
	var b strings.Builder
	for i := range c.target {
		b.WriteString(tokenText(c.key, i))
	}
	return b.String()
}

// usageOf sums the choices' usage; the n choices of one prompt count its
// tokens once, as vLLM and OpenAI count them.
func usageOf(choices []choice, n int) usage {
	var u usage
	for i, c := range choices {
		if i%n == 0 {
			u.PromptTokens += c.prompt
		}
		u.CompletionTokens += c.target
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// serveGeneration submits specs (n choices of each prompt, in order), waits on the engine and writes the answer,
// streamed or whole. Leaving early, for any reason, cancels the engine work.
func (w *Worker) serveGeneration(rw http.ResponseWriter, r *http.Request, api apiKind, p genParams, specs []genSpec, n int) {
	latch := w.latch.Load()
	faults := w.faults.Load().f
	if !w.addLatency(r.Context(), rw, faults.AddedLatency) {
		return
	}
	stallAfter := faults.StallAfter
	j, err := w.submit(specs)
	if err != nil {
		writeError(rw, err)
		return
	}
	defer w.release(j)
	g := &generation{api: api, chat: api == apiChat, created: time.Now().Unix(), params: p, n: n, job: j, latch: latch, stallAfter: stallAfter}
	prefix := [...]string{apiCompletions: "cmpl-", apiChat: "chatcmpl-", apiResponses: "resp_"}[api]
	g.id = fmt.Sprintf("%s%x-%d", prefix, w.wall0.UnixNano(), j.choices[0].id)
	if p.Stream {
		if api == apiResponses {
			w.streamResponse(r.Context(), rw, g)
			return
		}
		w.stream(r.Context(), rw, g)
		return
	}
	if stallAfter > 0 {
		// Nothing reaches the client before the whole answer, so a stall
		// anywhere means no answer at all.
		if err := w.hold(r.Context(), nil); errors.Is(err, ErrStopped) {
			writeError(rw, err)
		}
		return
	}
	snap, st := w.await(r.Context(), g, nil, func(cs []choice) bool {
		for _, c := range cs {
			if !c.done {
				return false
			}
		}
		return true
	})
	switch st {
	case awaitReady:
		writeJSON(rw, http.StatusOK, w.whole(g, snap))
	case awaitStopped:
		writeError(rw, ErrStopped)
	case awaitCrashed:
		panic(http.ErrAbortHandler)
	}
}

// awaitStatus says why await returned.
type awaitStatus int

const (
	awaitReady   awaitStatus = iota // the condition holds
	awaitGone                       // the client left
	awaitStopped                    // Run stopped
	awaitCrashed                    // the worker crashed (Faults.CrashAfter)
)

// await blocks until ready accepts the job's progress, the client leaves,
// the worker stops or it crashes, and returns the latest snapshot.
func (w *Worker) await(ctx context.Context, g *generation, snap []choice, ready func([]choice) bool) ([]choice, awaitStatus) {
	for {
		var aborted bool
		snap, aborted = w.snapshot(g.job, snap)
		if aborted {
			return snap, awaitStopped
		}
		if ready(snap) {
			return snap, awaitReady
		}
		select {
		case <-g.job.notify:
		case <-ctx.Done():
			return snap, awaitGone
		case <-g.latch.ch:
			return snap, awaitCrashed
		}
	}
}

// whole builds a non-streaming response.
func (w *Worker) whole(g *generation, cs []choice) any {
	if g.api == apiResponses {
		return w.response(g, cs[0], true)
	}
	if g.chat {
		resp := chatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: w.model, Usage: usageOf(cs, g.n)}
		for i, c := range cs {
			resp.Choices = append(resp.Choices, chatChoice{Index: i,
				Message: chatMessageOut{Role: "assistant", Content: c.text()}, FinishReason: c.finishReason()})
		}
		return resp
	}
	u := usageOf(cs, g.n)
	resp := completion{ID: g.id, Object: "text_completion", Created: g.created, Model: w.model, Usage: &u}
	for i, c := range cs {
		reason := c.finishReason()
		resp.Choices = append(resp.Choices, textChoice{Index: i, Text: c.text(), FinishReason: &reason})
	}
	return resp
}

// stream writes the answer as server-sent events, one chunk per token,
// flushed as the engine produces it.
func (w *Worker) stream(ctx context.Context, rw http.ResponseWriter, g *generation) {
	rc := openStream(rw)
	if rc == nil {
		return
	}
	var snap []choice
	sent := make([]int, len(g.job.choices))
	total := 0
	for {
		var st awaitStatus
		snap, st = w.await(ctx, g, snap, func(cs []choice) bool {
			for i, c := range cs {
				if c.tokens > sent[i] {
					return true
				}
			}
			return false
		})
		switch st {
		case awaitGone:
			return // nobody to tell
		case awaitStopped: // the worker stops: say so rather than end as if finished
			_ = writeEvent(rc, rw, errorEvent(ErrStopped))
			return
		case awaitCrashed:
			panic(http.ErrAbortHandler)
		}
		done := true
		for i, c := range snap {
			for ; sent[i] < c.tokens; sent[i]++ {
				if g.stallAfter > 0 && total >= g.stallAfter {
					_ = w.hold(ctx, nil) // until the client leaves or the worker stops
					return
				}
				total++
				if g.chat && sent[i] == 0 {
					// Like OpenAI and vLLM, a chat stream opens with a
					// chunk that carries the role and no content.
					if err := writeEvent(rc, rw, w.roleChunk(g, i)); err != nil {
						return
					}
				}
				if err := writeEvent(rc, rw, w.chunk(g, i, c, sent[i])); err != nil {
					return
				}
			}
			done = done && sent[i] >= c.target
		}
		if done {
			break
		}
	}
	if g.params.includeUsage() {
		u := usageOf(snap, g.n)
		var final any = completion{ID: g.id, Object: "text_completion", Created: g.created, Model: w.model,
			Choices: []textChoice{}, Usage: &u}
		if g.chat {
			final = chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: w.model,
				Choices: []chatChunkChoice{}, Usage: &u}
		}
		if err := writeEvent(rc, rw, final); err != nil {
			return
		}
	}
	if _, err := rw.Write([]byte("data: [DONE]\n\n")); err == nil {
		_ = rc.Flush()
	}
}

// openStream sends an event stream's headers at once, and returns the
// controller to flush its events with; nil when the client is gone.
func openStream(rw http.ResponseWriter) *http.ResponseController {
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(rw)
	if err := rc.Flush(); err != nil {
		return nil
	}
	return rc
}

// chunk builds the stream chunk for token k of choice i.
func (w *Worker) chunk(g *generation, i int, c choice, k int) any {
	var reason *string
	if k == c.target-1 {
		r := c.finishReason()
		reason = &r
	}
	text := tokenText(c.key, k)
	if g.chat {
		d := chatDelta{Content: text}
		return chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: w.model,
			Choices: []chatChunkChoice{{Index: i, Delta: d, FinishReason: reason}}}
	}
	return completion{ID: g.id, Object: "text_completion", Created: g.created, Model: w.model,
		Choices: []textChoice{{Index: i, Text: text, FinishReason: reason}}}
}

// roleChunk opens choice i of a chat stream.
func (w *Worker) roleChunk(g *generation, i int) chatChunk {
	return chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: w.model,
		Choices: []chatChunkChoice{{Index: i, Delta: chatDelta{Role: "assistant"}}}}
}

// writeEvent writes v as one SSE data event and flushes it.
func writeEvent(rc *http.ResponseController, rw http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode chunk: %w", err)
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := rw.Write(buf); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush chunk: %w", err)
	}
	return nil
}
