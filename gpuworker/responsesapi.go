package gpuworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// OpenAI's Responses API (POST /v1/responses), as vLLM serves it: stateless
// (vLLM keeps no responses unless its store is turned on, so
// previous_response_id is refused) unless Options.StoreResponses keeps
// them (responsestore.go), one output message per request, the
// usage as input_tokens and output_tokens. A streamed response opens with
// response.created and response.in_progress at once, before any token, as
// vLLM's does, then sends one response.output_text.delta per token and
// ends with response.completed, which carries the usage.

type responseRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	IgnoreEOS          bool            `json:"ignore_eos"` // vLLM's sampling extension, as for chat
}

// responseInputItem is a message item of input: a role and its content, a
// string or an array of parts (input_text) whose text counts.
type responseInputItem struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsePrompt turns input (a string or an array of message items) and
// instructions (a system message before them) into the chat prompt the
// engine runs.
func (req *responseRequest) prompt() (prompt, error) {
	msgs, err := req.messages(nil)
	if err != nil {
		return prompt{}, err
	}
	p, err := chatPrompt(msgs)
	if err != nil {
		return prompt{}, invalidRequest("input", "input must not be empty")
	}
	return p, nil
}

// messages is the conversation the request runs: history (a stored
// response's), then instructions and input.
func (req *responseRequest) messages(history []chatMessage) ([]chatMessage, error) {
	msgs := append([]chatMessage(nil), history...)
	if req.Instructions != nil && *req.Instructions != "" {
		b, _ := json.Marshal(*req.Instructions)
		msgs = append(msgs, chatMessage{Role: "system", Content: b})
	}
	raw := bytes.TrimSpace(req.Input)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		e := invalidRequest("input", "input is required")
		e.code = "missing_required_parameter"
		return nil, e
	case raw[0] == '"':
		msgs = append(msgs, chatMessage{Role: "user", Content: raw})
	default:
		var items []responseInputItem
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, invalidRequest("input", "input must be a string or an array of input items; found %s", jsonFound(err))
		}
		for _, it := range items {
			msgs = append(msgs, chatMessage(it))
		}
	}
	return msgs, nil
}

// Wire shapes.

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type outputText struct {
	Type        string   `json:"type"` // output_text
	Text        string   `json:"text"`
	Annotations []string `json:"annotations"`
}

type outputMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // message
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // response
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Error              *struct{}          `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []outputMessage    `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Tools              []struct{}         `json:"tools"`
	ToolChoice         string             `json:"tool_choice"`
	Usage              *responseUsage     `json:"usage"`
}

// responseEvent is one event of a streamed response; the members a type
// does not use are left out.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	Item           *outputMessage  `json:"item,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Logprobs       *[]struct{}     `json:"logprobs,omitempty"`
}

func (w *Worker) handleResponses(rw http.ResponseWriter, r *http.Request) {
	var req responseRequest
	if !w.readRequest(rw, r, &req, &req.Model) {
		return
	}
	var history []chatMessage
	if req.PreviousResponseID != nil {
		prev, ok := w.stored.get(*req.PreviousResponseID)
		if !ok {
			// Never made here, forgotten, or (without a store, as vLLM
			// by default) nothing is kept to continue from.
			writeError(rw, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "previous_response_id",
				code: "not_found", message: fmt.Sprintf("Response with id '%s' not found.", *req.PreviousResponseID)})
			return
		}
		history = prev.messages
	}
	maxTokens := defaultChatMaxTokens
	if req.MaxOutputTokens != nil {
		if maxTokens = *req.MaxOutputTokens; maxTokens < 1 {
			writeError(rw, invalidRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", maxTokens))
			return
		}
	}
	msgs, err := req.messages(history)
	if err != nil {
		writeError(rw, err)
		return
	}
	p, err := chatPrompt(msgs)
	if err != nil {
		writeError(rw, invalidRequest("input", "input must not be empty"))
		return
	}
	params := genParams{Model: req.Model, Stream: req.Stream, IgnoreEOS: req.IgnoreEOS, MaxTokens: req.MaxOutputTokens}
	if w.stored != nil && (req.Store == nil || *req.Store) {
		params.keep = msgs
	}
	if req.PreviousResponseID != nil {
		params.previous = *req.PreviousResponseID
	}
	w.serveGeneration(rw, r, apiResponses, params, params.specs([]prompt{p}, maxTokens, 1), 1)
}

// response builds the response object of g from its one choice c; done
// says it is finished (completed, or incomplete at max_output_tokens).
func (w *Worker) response(g *generation, c choice, done bool) *responseObject {
	resp := &responseObject{ID: g.id, Object: "response", CreatedAt: g.created, Status: "in_progress", Model: w.model,
		MaxOutputTokens: g.params.MaxTokens, Output: []outputMessage{}, ParallelToolCalls: true, Tools: []struct{}{},
		ToolChoice: "auto"}
	if g.params.previous != "" {
		resp.PreviousResponseID = &g.params.previous
	}
	if !done {
		return resp
	}
	resp.Status = "completed"
	if c.finishReason() == finishLength {
		resp.Status, resp.IncompleteDetails = "incomplete", &incompleteDetails{Reason: "max_output_tokens"}
	}
	text := c.text()
	resp.Output = []outputMessage{outputMessageOf(g, text, "completed")}
	u := usageOf([]choice{c}, 1)
	resp.Usage = &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if g.params.keep != nil {
		answer, _ := json.Marshal(text)
		w.stored.put(resp, append(g.params.keep[:len(g.params.keep):len(g.params.keep)], chatMessage{Role: "assistant", Content: answer}))
	}
	return resp
}

// itemID is the id of g's one output message.
func itemID(g *generation) string { return "msg_" + g.id[len("resp_"):] }

// outputMessageOf is g's output message, its text given once completed.
func outputMessageOf(g *generation, text, status string) outputMessage {
	m := outputMessage{ID: itemID(g), Type: "message", Status: status, Role: "assistant", Content: []outputText{}}
	if status == "completed" {
		m.Content = []outputText{{Type: "output_text", Text: text, Annotations: []string{}}}
	}
	return m
}

// streamResponse writes g's answer as the Responses API's events: it opens
// at once, then one delta per token as the engine produces it.
func (w *Worker) streamResponse(ctx context.Context, rw http.ResponseWriter, g *generation) {
	rc := openStream(rw)
	if rc == nil {
		return
	}
	seq := 0
	send := func(ev responseEvent) bool {
		ev.SequenceNumber, seq = seq, seq+1
		return writeNamedEvent(rc, rw, ev.Type, ev) == nil
	}
	zero := 0
	if !send(responseEvent{Type: "response.created", Response: w.response(g, choice{}, false)}) ||
		!send(responseEvent{Type: "response.in_progress", Response: w.response(g, choice{}, false)}) {
		return
	}
	var snap []choice
	sent, id := 0, itemID(g)
	for {
		var st awaitStatus
		snap, st = w.await(ctx, g, snap, func(cs []choice) bool { return cs[0].tokens > sent })
		switch st {
		case awaitGone:
			return
		case awaitStopped:
			_ = writeEvent(rc, rw, errorEvent(ErrStopped))
			return
		case awaitCrashed:
			panic(http.ErrAbortHandler)
		}
		c := snap[0]
		for ; sent < c.tokens; sent++ {
			if g.stallAfter > 0 && sent >= g.stallAfter {
				_ = w.hold(ctx, nil)
				return
			}
			if sent == 0 {
				item := outputMessageOf(g, "", "in_progress")
				if !send(responseEvent{Type: "response.output_item.added", OutputIndex: &zero, Item: &item}) ||
					!send(responseEvent{Type: "response.content_part.added", ItemID: item.ID, OutputIndex: &zero, ContentIndex: &zero,
						Part: &outputText{Type: "output_text", Annotations: []string{}}}) {
					return
				}
			}
			delta := tokenText(c.key, sent)
			if !send(responseEvent{Type: "response.output_text.delta", ItemID: id, OutputIndex: &zero,
				ContentIndex: &zero, Delta: &delta, Logprobs: &[]struct{}{}}) {
				return
			}
		}
		if sent >= c.target {
			break
		}
	}
	c := snap[0]
	text := c.text()
	item := outputMessageOf(g, text, "completed")
	part := item.Content[0]
	if !send(responseEvent{Type: "response.output_text.done", ItemID: item.ID, OutputIndex: &zero, ContentIndex: &zero, Text: &text, Logprobs: &[]struct{}{}}) ||
		!send(responseEvent{Type: "response.content_part.done", ItemID: item.ID, OutputIndex: &zero, ContentIndex: &zero, Part: &part}) ||
		!send(responseEvent{Type: "response.output_item.done", OutputIndex: &zero, Item: &item}) {
		return
	}
	final := w.response(g, c, true)
	kind := "response.completed"
	if final.Status == "incomplete" {
		kind = "response.incomplete"
	}
	send(responseEvent{Type: kind, Response: final})
}

// writeNamedEvent writes v as one SSE event named kind and flushes it.
func writeNamedEvent(rc *http.ResponseController, rw http.ResponseWriter, kind string, v any) error {
	if _, err := rw.Write([]byte("event: " + kind + "\n")); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return writeEvent(rc, rw, v)
}
