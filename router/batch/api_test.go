package batch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/batch"
)

// TestEndToEnd drives a batch with the official client: upload, create,
// poll, download the output and the errors.
func TestEndToEnd(t *testing.T) {
	f := start(t, setup{})
	acme := f.client(t, "sk-acme")
	ctx := context.Background()

	input := chatLines(5, model, 8) + `{"custom_id":"refused","method":"POST","url":"/v1/chat/completions","body":{"model":"` + model +
		`","messages":[{"role":"user","content":"hi"}],"max_tokens":0}}` + "\n"
	in := upload(t, acme, input)
	assert.Equal(t, openai.FileObjectPurposeBatch, in.Purpose)
	assert.EqualValues(t, len(input), in.Bytes)
	assert.Equal(t, "input.jsonl", in.Filename)

	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata: shared.Metadata{"job": "nightly"}})
	require.NoError(t, err)
	assert.Equal(t, openai.BatchStatusValidating, b.Status)
	assert.Equal(t, "nightly", b.Metadata["job"])
	assert.Positive(t, b.ExpiresAt)

	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 6, b.RequestCounts.Total)
	assert.EqualValues(t, 5, b.RequestCounts.Completed)
	assert.EqualValues(t, 1, b.RequestCounts.Failed)
	assert.Equal(t, model, b.Model)
	assert.Positive(t, b.InProgressAt)
	assert.Positive(t, b.FinalizingAt)
	assert.Positive(t, b.CompletedAt)
	assert.Positive(t, b.Usage.OutputTokens)
	assert.Equal(t, b.Usage.InputTokens+b.Usage.OutputTokens, b.Usage.TotalTokens)

	out := download(t, acme, b.OutputFileID)
	require.Len(t, out, 5)
	for i := range 5 {
		l := out[fmt.Sprintf("req-%d", i)]
		require.NotNil(t, l.Response)
		assert.Nil(t, l.Error)
		assert.Equal(t, http.StatusOK, l.Response.StatusCode)
		assert.NotEmpty(t, l.Response.RequestID)
		var cc openai.ChatCompletion
		require.NoError(t, json.Unmarshal(l.Response.Body, &cc))
		require.NotEmpty(t, cc.Choices)
		assert.Equal(t, "flex", string(cc.ServiceTier), "the line ran in the flex class")
	}
	errs := download(t, acme, b.ErrorFileID)
	require.Len(t, errs, 1)
	l := errs["refused"]
	require.NotNil(t, l.Response, "the line ran, and was refused")
	assert.Equal(t, http.StatusBadRequest, l.Response.StatusCode)
	assert.Contains(t, string(l.Response.Body), "max_tokens")
	// The lines are counted apart from clients' requests.
	assert.Equal(t, 5.0, f.counter(t, "sluice_http_requests_total", "route", "batch:/v1/chat/completions", "code", "200"))
	assert.Equal(t, 1.0, f.counter(t, "sluice_http_requests_total", "route", "batch:/v1/chat/completions", "code", "400"))
	assert.Zero(t, f.counter(t, "sluice_http_requests_total", "route", "/v1/chat/completions"))
	// The API's own calls are counted by their route's pattern.
	assert.Equal(t, 1.0, f.counter(t, "sluice_http_requests_total", "route", "/v1/files", "code", "200", "model", "none", "tier", "pro", "class", "none"), "the upload")
	assert.Equal(t, 1.0, f.counter(t, "sluice_http_requests_total", "route", "/v1/batches", "code", "200"), "the create")
	assert.Positive(t, f.counter(t, "sluice_http_requests_total", "route", "/v1/batches/{id}", "code", "200"), "the polls")
	assert.Positive(t, f.counter(t, "sluice_http_requests_total", "route", "/v1/files/{id}/content", "code", "200"), "the downloads")

	// The files are listed, newest first, and readable as objects.
	files, err := acme.Files.List(ctx, openai.FileListParams{})
	require.NoError(t, err)
	var ids []string
	for _, fo := range files.Data {
		ids = append(ids, fo.ID)
	}
	assert.ElementsMatch(t, []string{in.ID, b.OutputFileID, b.ErrorFileID}, ids)
	outFile, err := acme.Files.Get(ctx, b.OutputFileID)
	require.NoError(t, err)
	assert.Equal(t, openai.FileObjectPurposeBatchOutput, outFile.Purpose)
	only, err := acme.Files.List(ctx, openai.FileListParams{Purpose: openai.String("batch")})
	require.NoError(t, err)
	require.Len(t, only.Data, 1)
	assert.Equal(t, in.ID, only.Data[0].ID)

	res, err := acme.Files.Content(ctx, in.ID)
	require.NoError(t, err)
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, input, string(got), "the input comes back byte for byte")

	page, err := acme.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, b.ID, page.Data[0].ID)
	// Paging goes on after a listed item; after one that is not there
	// (deleted meanwhile) it is a 400, not the first page again.
	rest, err := acme.Files.List(ctx, openai.FileListParams{After: openai.String(ids[0])})
	require.NoError(t, err)
	assert.Len(t, rest.Data, 2)
	for _, list := range []func() error{
		func() error {
			_, err := acme.Files.List(ctx, openai.FileListParams{After: openai.String("file-gone")})
			return err
		},
		func() error {
			_, err := acme.Batches.List(ctx, openai.BatchListParams{After: openai.String("batch_gone")})
			return err
		},
	} {
		var apiErr *openai.Error
		require.ErrorAs(t, list(), &apiErr)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		assert.Equal(t, "after", apiErr.Param)
	}

	// The input of a batch that ended may go.
	del, err := acme.Files.Delete(ctx, in.ID)
	require.NoError(t, err)
	assert.True(t, del.Deleted)
	_, err = acme.Files.Get(ctx, in.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
}

// TestEmbeddingsAndCompletions runs the other two endpoints.
// TestEmbeddingsAndCompletions: the other endpoints a batch may run,
// the Responses API's among them, each line answered 200.
func TestEmbeddingsAndCompletions(t *testing.T) {
	f := start(t, setup{})
	acme := f.client(t, "sk-acme")
	tests := []struct {
		endpoint openai.BatchNewParamsEndpoint
		body     string
	}{
		{openai.BatchNewParamsEndpointV1Embeddings, `{"model":"` + model + `","input":"hello"}`},
		{openai.BatchNewParamsEndpointV1Completions, `{"model":"` + model + `","prompt":"hello","max_tokens":4}`},
		{openai.BatchNewParamsEndpointV1Responses, `{"model":"` + model + `","input":"hello","max_output_tokens":4}`},
	}
	for _, tt := range tests {
		t.Run(string(tt.endpoint), func(t *testing.T) {
			line := fmt.Sprintf(`{"custom_id":"a","method":"POST","url":%q,"body":%s}`, tt.endpoint, tt.body)
			in := upload(t, acme, line+"\n"+strings.Replace(line, `"a"`, `"b"`, 1))
			b := create(t, acme, in.ID, tt.endpoint)
			b = await(t, acme, b.ID, openai.BatchStatusCompleted)
			assert.EqualValues(t, 2, b.RequestCounts.Completed)
			out := download(t, acme, b.OutputFileID)
			assert.Len(t, out, 2)
			for _, l := range out {
				require.NotNil(t, l.Response, "%+v", l)
				assert.Equal(t, http.StatusOK, l.Response.StatusCode, "%s", l.Response.Body)
			}
			assert.Empty(t, b.ErrorFileID)
		})
	}
}

// TestTenantsSeeTheirOwn: another tenant's files and batches are 404 to
// every call, as if absent, and a batch cannot take another's file.
func TestTenantsSeeTheirOwn(t *testing.T) {
	f := start(t, setup{})
	ctx := context.Background()
	acme, rival := f.client(t, "sk-acme"), f.client(t, "sk-rival")
	in := upload(t, acme, chatLines(2, model, 4))
	b := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)

	_, err := rival.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	msg := apiError(t, err, http.StatusNotFound, "not_found")
	assert.Equal(t, "No such File object: "+in.ID, msg)
	_, err = rival.Files.Get(ctx, in.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	_, err = rival.Files.Content(ctx, in.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	_, err = rival.Files.Delete(ctx, in.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	_, err = rival.Batches.Get(ctx, b.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	_, err = rival.Batches.Cancel(ctx, b.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	files, err := rival.Files.List(ctx, openai.FileListParams{})
	require.NoError(t, err)
	assert.Empty(t, files.Data)
	batches, err := rival.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	assert.Empty(t, batches.Data)

	// Nothing of acme's was touched.
	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 2, b.RequestCounts.Completed)

	// No key, a wrong key: 401 before the batch API.
	nobody := f.client(t, "sk-nobody")
	_, err = nobody.Files.List(ctx, openai.FileListParams{})
	apiError(t, err, http.StatusUnauthorized, "invalid_api_key")
}

// TestBadRequests: what the API refuses at once, each with its status and
// an OpenAI-shaped error.
func TestBadRequests(t *testing.T) {
	f := start(t, setup{svc: batchLimits(300, 3)})
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	good := upload(t, acme, chatLines(1, model, 4))

	_, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(strings.Repeat("x", 301)), "big.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	msg := apiError(t, err, http.StatusRequestEntityTooLarge, "file_too_large")
	assert.Contains(t, msg, "300 bytes")
	_, err = acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("{}\n{}\n{}\n{}\n"), "many.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	msg = apiError(t, err, http.StatusBadRequest, "too_many_requests_in_file")
	assert.Contains(t, msg, "4 requests")
	_, err = acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("{}"), "a.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeFineTune})
	apiError(t, err, http.StatusBadRequest, "invalid_value")

	tests := []struct {
		name   string
		params openai.BatchNewParams
		status int
		code   string
	}{
		{"unknown file", openai.BatchNewParams{InputFileID: "file-nope", Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, http.StatusNotFound, "not_found"},
		{"endpoint not served", openai.BatchNewParams{InputFileID: good.ID, Endpoint: openai.BatchNewParamsEndpointV1Moderations,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, http.StatusBadRequest, "invalid_value"},
		{"window", openai.BatchNewParams{InputFileID: good.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: "1h"}, http.StatusBadRequest, "invalid_value"},
		{"no file", openai.BatchNewParams{Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, http.StatusBadRequest, "missing_required_parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := acme.Batches.New(ctx, tt.params)
			apiError(t, err, tt.status, tt.code)
		})
	}
	// Malformed bodies are named in JSON's words, not the server's Go types.
	err = acme.Post(ctx, "batches", []byte(`{"input_file_id":5,"endpoint":"/v1/chat/completions","completion_window":"24h"}`), nil)
	msg = apiError(t, err, http.StatusBadRequest, "invalid_type")
	assert.Equal(t, "Invalid type for 'input_file_id': expected a string, but got a number instead.", msg)
	err = acme.Post(ctx, "batches", []byte(`[]`), nil)
	msg = apiError(t, err, http.StatusBadRequest, "invalid_json")
	assert.NotContains(t, msg, "Go ")
	// A parameter this server does not know is refused, as OpenAI does (it
	// was ignored), and so is anything after the object.
	err = acme.Post(ctx, "batches", []byte(`{"input_file_id":"`+good.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h","completion_windw":"48h"}`), nil)
	msg = apiError(t, err, http.StatusBadRequest, "unknown_parameter")
	assert.Equal(t, "Unrecognized request argument supplied: completion_windw", msg)
	err = acme.Post(ctx, "batches", []byte(`{"input_file_id":"`+good.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"} {}`), nil)
	apiError(t, err, http.StatusBadRequest, "invalid_json")
	list, err := acme.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	assert.Empty(t, list.Data, "no batch was created by a refused call")
	// An output file is no batch input.
	b := create(t, acme, good.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: b.OutputFileID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	assert.Contains(t, apiError(t, err, http.StatusBadRequest, "invalid_value"), "purpose")
	_, err = acme.Batches.Cancel(ctx, b.ID)
	apiError(t, err, http.StatusBadRequest, "invalid_state")

	// Unknown routes and methods are OpenAI-shaped too.
	res, err := http.Post(f.url+"/v1/files/"+good.ID, "application/json", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "the key comes first")
	req, _ := http.NewRequest(http.MethodPut, f.url+"/v1/files/"+good.ID, nil)
	req.Header.Set("Authorization", "Bearer sk-acme")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	assert.Equal(t, "DELETE, GET", res.Header.Get("Allow"))
	assert.Contains(t, string(body), `"code":"method_not_allowed"`)

	// Nothing was lost on the way.
	got, err := acme.Files.Get(ctx, good.ID)
	require.NoError(t, err)
	assert.Equal(t, good.Bytes, got.Bytes)
}

// TestStalledUploadEnds: an upload that stops coming ends with 408 after
// UploadIdle (it held its socket and temporary file for good), while one
// that keeps coming, however long it takes in all, is stored.
func TestStalledUploadEnds(t *testing.T) {
	f := start(t, setup{svc: batch.Options{UploadIdle: 300 * time.Millisecond}})
	head := func(conn net.Conn, length int) {
		_, err := fmt.Fprintf(conn, "POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme\r\n"+
			"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n", length)
		require.NoError(t, err)
	}
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"` + model + `","messages":[]}}` + "\n"
	body := "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
		"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n" +
		strings.Repeat(line, 4000) + "\r\n--B--\r\n"

	stalled, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stalled.Close() })
	head(stalled, len(body))
	_, err = io.WriteString(stalled, body[:100]) // then nothing
	require.NoError(t, err)
	require.NoError(t, stalled.SetReadDeadline(time.Now().Add(10*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(stalled), nil)
	require.NoError(t, err, "answered, not held")
	assert.Equal(t, http.StatusRequestTimeout, res.StatusCode)
	assert.Contains(t, apiErrorBody(t, res), "The upload stalled")

	steady, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = steady.Close() })
	head(steady, len(body))
	start := time.Now()
	for rest := body; rest != ""; { // 64 KiB every 150 ms: longer in all than UploadIdle
		n := min(len(rest), 64<<10)
		_, err = io.WriteString(steady, rest[:n])
		require.NoError(t, err)
		rest = rest[n:]
		if rest != "" {
			time.Sleep(150 * time.Millisecond)
		}
	}
	res, err = http.ReadResponse(bufio.NewReader(steady), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode, apiErrorBody(t, res))
	assert.Greater(t, time.Since(start), 300*time.Millisecond)
}

func apiErrorBody(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	res.Body.Close()
	return string(b)
}

// TestUploadsCountAgainstTheTenantsLimits: an upload is a request to the
// tenant's rate limit (they were unlimited).
func TestUploadsCountAgainstTheTenantsLimits(t *testing.T) {
	f := start(t, setup{tenants: []*auth.Tenant{{Name: "acme", Tier: "free", Models: []string{model}, DefaultMaxTokens: 16,
		Limits: quota.Limits{RequestsPerMinute: 6, RequestBurst: 2}}}})
	acme := f.client(t, "sk-acme")
	upload(t, acme, chatLines(1, model, 4))
	upload(t, acme, chatLines(1, model, 4))
	_, err := acme.Files.New(context.Background(), openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(1, model, 4)), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	apiError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")
	list, err := acme.Files.List(context.Background(), openai.FileListParams{})
	require.NoError(t, err, "reading is not limited")
	assert.Len(t, list.Data, 2)
}

// TestTenantStorageIsCapped: a tenant's files may hold MaxTenantBytes; an
// upload past it is refused and its bytes dropped, until files are
// deleted. Another tenant is not affected.
func TestTenantStorageIsCapped(t *testing.T) {
	lines := chatLines(3, model, 4)
	capped := int64(len(lines)) * 5 / 2 // two files fit, not three
	f := start(t, setup{svc: batch.Options{MaxTenantBytes: capped}})
	ctx := context.Background()
	acme, rival := f.client(t, "sk-acme"), f.client(t, "sk-rival")
	first := upload(t, acme, lines)
	upload(t, acme, lines)
	_, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	msg := apiError(t, err, http.StatusBadRequest, "storage_limit_exceeded")
	assert.Contains(t, msg, fmt.Sprintf("of the %d bytes you may keep", capped))
	list, err := acme.Files.List(ctx, openai.FileListParams{})
	require.NoError(t, err)
	assert.Len(t, list.Data, 2, "the refused upload is not kept")
	upload(t, rival, lines)

	_, err = acme.Files.Delete(ctx, first.ID)
	require.NoError(t, err)
	upload(t, acme, lines)

	// Uploads running at once are counted against the cap as each is
	// saved: of ten, only what fits is kept (all ten were, read against
	// what the tenant held as each began).
	for _, f := range fileIDs(t, rival) {
		_, err = rival.Files.Delete(ctx, f)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	var kept, refused atomic.Int32
	for range 10 {
		wg.Go(func() {
			_, err := rival.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines), "in.jsonl", "application/jsonl"),
				Purpose: openai.FilePurposeBatch})
			var ae *openai.Error
			switch {
			case err == nil:
				kept.Add(1)
			case errors.As(err, &ae) && ae.Code == "storage_limit_exceeded":
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 2, kept.Load())
	assert.EqualValues(t, 8, refused.Load())
	assert.Len(t, fileIDs(t, rival), 2)
}

// fileIDs is the ids of c's files.
func fileIDs(t *testing.T, c openai.Client) []string {
	t.Helper()
	page, err := c.Files.List(context.Background(), openai.FileListParams{})
	require.NoError(t, err)
	var ids []string
	for _, f := range page.Data {
		ids = append(ids, f.ID)
	}
	return ids
}

// TestBadRangeIsJSON: a download's Range past the file's end, or not a
// range, is the API's JSON error (it was net/http's plain text).
func TestBadRangeIsJSON(t *testing.T) {
	f := start(t, setup{})
	in := upload(t, f.client(t, "sk-acme"), chatLines(2, model, 4))
	for _, rng := range []string{"bytes=99999999-", "bytes=zz"} {
		req, err := http.NewRequest(http.MethodGet, f.url+"/v1/files/"+in.ID+"/content", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk-acme")
		req.Header.Set("Range", rng)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusRequestedRangeNotSatisfiable, res.StatusCode)
		assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
		var e struct {
			Error struct{ Message, Code, Param string }
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&e), rng)
		require.NoError(t, res.Body.Close())
		assert.Equal(t, "invalid_range", e.Error.Code)
		assert.Equal(t, "Range", e.Error.Param)
	}
	req, err := http.NewRequest(http.MethodGet, f.url+"/v1/files/"+in.ID+"/content", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Range", "bytes=0-9")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.Equal(t, http.StatusPartialContent, res.StatusCode, "a valid range is served")
	assert.Len(t, b, 10)
}

// TestCreateRefusedAtStorageCap: a tenant whose files, its batches'
// outputs included, hold MaxTenantBytes creates no more batches until it
// deletes some (creates went on, and wrote outputs past the cap).
func TestCreateRefusedAtStorageCap(t *testing.T) {
	lines := chatLines(3, model, 4)
	capped := int64(len(lines)) + 1 // the input fits; its batch's output takes the tenant past the cap
	f := start(t, setup{svc: batch.Options{MaxTenantBytes: capped}})
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	in := upload(t, acme, lines)
	first := await(t, acme, create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions).ID, openai.BatchStatusCompleted)
	require.NotEmpty(t, first.OutputFileID)

	_, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	msg := apiError(t, err, http.StatusBadRequest, "storage_limit_exceeded")
	assert.Contains(t, msg, fmt.Sprintf("of the %d bytes you may keep", capped))
	assert.Contains(t, msg, "to create batches")
	list, err := acme.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	assert.Len(t, list.Data, 1, "the refused batch is not kept")

	_, err = acme.Files.Delete(ctx, first.OutputFileID)
	require.NoError(t, err)
	create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
}

// TestBatchObjectHasEveryKey: a batch object carries every key of
// OpenAI's at every status, null while unknown (model and usage were
// left out until the batch was validated and had ended).
func TestBatchObjectHasEveryKey(t *testing.T) {
	f := start(t, setup{})
	f.stopRunner() // the batch stays validating
	acme := f.client(t, "sk-acme")
	b := create(t, acme, upload(t, acme, chatLines(1, model, 4)).ID, openai.BatchNewParamsEndpointV1ChatCompletions)

	keys := []string{"id", "object", "endpoint", "model", "errors", "input_file_id", "completion_window", "status",
		"output_file_id", "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
		"failed_at", "expired_at", "cancelling_at", "cancelled_at", "request_counts", "metadata", "usage"}
	unknown := []string{"model", "errors", "output_file_id", "error_file_id", "in_progress_at", "finalizing_at",
		"completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at", "usage"}
	for _, path := range []string{"/v1/batches/" + b.ID, "/v1/batches"} {
		req, err := http.NewRequest(http.MethodGet, f.url+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk-acme")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body struct {
			Data []map[string]any `json:"data"`
		}
		var obj map[string]any
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode, string(raw))
		if path == "/v1/batches" {
			require.NoError(t, json.Unmarshal(raw, &body))
			require.Len(t, body.Data, 1)
			obj = body.Data[0]
		} else {
			require.NoError(t, json.Unmarshal(raw, &obj))
		}
		for _, k := range keys {
			assert.Contains(t, obj, k, "%s: key %s", path, k)
		}
		for _, k := range unknown {
			assert.Nil(t, obj[k], "%s: %s is not known yet", path, k)
		}
		assert.Len(t, obj, len(keys), "%s: no other key", path)
	}
}
