package gpuworker_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// TestResponsesAPI: the official client's Responses calls, whole and
// streamed, get the same text and usage, in the events vLLM sends: the
// stream opens before any token, and its last event carries the usage.
func TestResponsesAPI(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Seed: 3})
	c := client(srv)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: model, Instructions: openai.String("Be brief."),
		MaxOutputTokens: openai.Int(12), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello to the fleet.")}}
	res, err := c.Responses.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, model, res.Model)
	assert.True(t, strings.HasPrefix(res.ID, "resp_"), res.ID)
	require.NotEmpty(t, res.OutputText())
	assert.Positive(t, res.Usage.InputTokens)
	assert.Positive(t, res.Usage.OutputTokens)
	assert.LessOrEqual(t, res.Usage.OutputTokens, int64(12))
	assert.Equal(t, res.Usage.InputTokens+res.Usage.OutputTokens, res.Usage.TotalTokens)
	if res.Usage.OutputTokens == 12 {
		assert.Equal(t, responses.ResponseStatusIncomplete, res.Status)
	} else {
		assert.Equal(t, responses.ResponseStatusCompleted, res.Status)
	}

	stream := c.Responses.NewStreaming(ctx, params)
	var kinds []string
	var text strings.Builder
	var last responses.Response
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			last = ev.Response
		}
	}
	require.NoError(t, stream.Err())
	require.Greater(t, len(kinds), 6)
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, kinds[:4])
	assert.Equal(t, res.OutputText(), text.String(), "the same seed: the same text, whole or streamed")
	assert.Equal(t, res.Usage.InputTokens, last.Usage.InputTokens)
	assert.Equal(t, res.Usage.OutputTokens, last.Usage.OutputTokens)
	assert.Equal(t, int(res.Usage.OutputTokens), strings.Count(strings.Join(kinds, " "), "response.output_text.delta"), "one delta per token")

	// Input items, as the client sends a conversation.
	items := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Hi there.", responses.EasyInputMessageRoleUser)}
	res, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items}})
	require.NoError(t, err)
	assert.Positive(t, res.Usage.InputTokens)

	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: model, PreviousResponseID: openai.String(res.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And again.")}})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "no store: nothing to continue from, as vLLM by default")
}

// TestResponsesAPIStore: with StoreResponses a worker keeps its responses
// as vLLM's store does: a request continues one (its whole conversation
// runs again, so its input grows by the last turn's), GET reads it and
// DELETE forgets it; store: false keeps nothing, and the oldest go past
// the bound.
func TestResponsesAPIStore(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{StoreResponses: 2})
	c := client(srv)
	ctx := context.Background()
	turn := func(prev, text string) responses.ResponseNewParams {
		p := responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(6),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
		if prev != "" {
			p.PreviousResponseID = openai.String(prev)
		}
		return p
	}
	first, err := c.Responses.New(ctx, turn("", "Hello there."))
	require.NoError(t, err)
	second, err := c.Responses.New(ctx, turn(first.ID, "Hello there."))
	require.NoError(t, err)
	assert.Equal(t, first.ID, second.PreviousResponseID)
	assert.Greater(t, second.Usage.InputTokens, first.Usage.InputTokens+first.Usage.OutputTokens,
		"the first turn, its answer and the new input")

	got, err := c.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, first.OutputText(), got.OutputText())

	p := turn("", "Do not keep this.")
	p.Store = openai.Bool(false)
	unkept, err := c.Responses.New(ctx, p)
	require.NoError(t, err)
	_, err = c.Responses.Get(ctx, unkept.ID, responses.ResponseGetParams{})
	requireNotFound(t, err)

	require.NoError(t, c.Responses.Delete(ctx, second.ID))
	_, err = c.Responses.New(ctx, turn(second.ID, "More."))
	requireNotFound(t, err)
	requireNotFound(t, c.Responses.Delete(ctx, second.ID))

	for range 2 { // past the bound of two: the first goes
		_, err = c.Responses.New(ctx, turn("", "Filler."))
		require.NoError(t, err)
	}
	_, err = c.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	requireNotFound(t, err)
}

func requireNotFound(t *testing.T, err error) {
	t.Helper()
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, apiErr.RawJSON())
}
