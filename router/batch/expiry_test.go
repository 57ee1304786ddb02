package batch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/batch"
)

// clock is a settable clock for the Service and its runner.
type clock struct{ now atomic.Int64 } // Unix nanoseconds

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Now().UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) advance(d time.Duration) { c.now.Add(int64(d)) }

// TestFilesExpire: an upload's expires_after (or batch.file_expiry when it
// says nothing) sets the file's expires_at; past it the file is gone from
// the API and the runner deletes it and its bytes, but for the input of a
// batch still running, deleted once that batch ends. A batch's
// output_expires_after does the same for its output file.
func TestFilesExpire(t *testing.T) {
	c := newClock()
	f := start(t, setup{svc: batch.Options{FileExpiry: 2 * time.Hour, Now: c.Now}})
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	lines := chatLines(2, model, 4)
	newFile := func(params openai.FileNewParams) (*openai.FileObject, error) {
		params.File = openai.File(strings.NewReader(lines), "in.jsonl", "application/jsonl")
		params.Purpose = openai.FilePurposeBatch
		return acme.Files.New(ctx, params)
	}

	kept := upload(t, acme, lines)
	assert.Equal(t, kept.CreatedAt+7200, kept.ExpiresAt, "batch.file_expiry when the upload does not say")
	short, err := newFile(openai.FileNewParams{ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600}})
	require.NoError(t, err)
	assert.Equal(t, short.CreatedAt+3600, short.ExpiresAt, "expires_after")
	got, err := acme.Files.Get(ctx, short.ID)
	require.NoError(t, err)
	assert.Equal(t, short.ExpiresAt, got.ExpiresAt)

	for _, bad := range []struct {
		param   string
		fields  []string // name, value, ...
		code    string
		message string
	}{
		{"expires_after.seconds", []string{"expires_after[anchor]", "created_at", "expires_after[seconds]", "60"}, "invalid_value", "between 3600 (1 hour) and 2592000 (30 days), got 60"},
		{"expires_after.seconds", []string{"expires_after[anchor]", "created_at", "expires_after[seconds]", "soon"}, "invalid_type", "must be an integer"},
		{"expires_after.anchor", []string{"expires_after[anchor]", "last_used", "expires_after[seconds]", "3600"}, "invalid_value", `must be "created_at"`},
		{"expires_after.seconds", []string{"expires_after[anchor]", "created_at"}, "missing_required_parameter", "expires_after.seconds"},
	} {
		status, e := rawUpload(t, f.url, lines, append([]string{"purpose", "batch"}, bad.fields...)...)
		assert.Equal(t, http.StatusBadRequest, status, bad.fields)
		assert.Equal(t, bad.code, e.Code, bad.fields)
		assert.Equal(t, bad.param, e.Param, bad.fields)
		assert.Contains(t, e.Message, bad.message)
	}
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: kept.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: 10}})
	assert.Contains(t, apiError(t, err, http.StatusBadRequest, "invalid_value"), "output_expires_after.seconds must be between 3600")

	// The short file is the input of a batch created while no runner
	// runs, and it expires before one starts.
	f.stopRunner()
	running, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: short.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: 5400}})
	require.NoError(t, err)
	c.advance(time.Hour)
	_, err = acme.Files.Get(ctx, short.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	_, err = acme.Files.Content(ctx, short.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	list, err := acme.Files.List(ctx, openai.FileListParams{})
	require.NoError(t, err)
	require.Len(t, list.Data, 1, "an expired file is not listed")
	assert.Equal(t, kept.ID, list.Data[0].ID)
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: short.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	apiError(t, err, http.StatusNotFound, "not_found")

	// A runner starts: its first sweep finds the file expired and in use.
	reg := prometheus.NewRegistry()
	f.run(t, batch.RunnerOptions{Handler: f.router, RunAs: runAs, Metrics: reg, Interval: 20 * time.Millisecond})
	done := await(t, acme, running.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 2, done.RequestCounts.Completed, "the batch read its input though it expired meanwhile")
	out, err := acme.Files.Get(ctx, done.OutputFileID)
	require.NoError(t, err)
	assert.Equal(t, out.CreatedAt+5400, out.ExpiresAt, "output_expires_after")
	assert.Len(t, download(t, acme, done.OutputFileID), 2)

	// A sweep (each minute) an hour past its expiry deletes the expired
	// input, now that its batch has ended.
	blob := func(id string) error {
		_, err := os.Stat(filepath.Join(f.dir, "files", id))
		return err
	}
	require.NoError(t, blob(short.ID), "kept while its batch ran")
	c.advance(time.Hour + time.Minute)
	require.Eventually(t, func() bool { return expired(t, reg) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.ErrorIs(t, blob(short.ID), os.ErrNotExist, "its bytes are gone")
	_, err = f.store.File(ctx, short.ID)
	assert.ErrorIs(t, err, batch.ErrNotFound)
	require.NoError(t, blob(kept.ID), "a file not expired is kept")

	c.advance(2 * time.Hour) // an hour past kept's 2h and the output's 1.5h
	require.Eventually(t, func() bool { return expired(t, reg) == 3 }, 10*time.Second, 10*time.Millisecond)
	list, err = acme.Files.List(ctx, openai.FileListParams{})
	require.NoError(t, err)
	assert.Empty(t, list.Data)
	entries, err := os.ReadDir(filepath.Join(f.dir, "files"))
	require.NoError(t, err)
	assert.Empty(t, entries, "every expired file's bytes are gone")
}

// expired is reg's sluice_batch_files_expired_total.
func expired(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "sluice_batch_files_expired_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestPagingGoesOnPastAnExpiredCursor: a client paging through its files
// while the file its cursor names expires gets the next page (it got a
// 400: the cursor was "deleted").
func TestPagingGoesOnPastAnExpiredCursor(t *testing.T) {
	c := newClock()
	f := start(t, setup{svc: batch.Options{FileExpiry: 2 * time.Hour, Now: c.Now}})
	ctx := context.Background()
	acme := f.client(t, "sk-acme")
	lines := chatLines(1, model, 4)
	first, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch, ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600}})
	require.NoError(t, err)
	c.advance(time.Second)
	rest := []string{upload(t, acme, lines).ID, upload(t, acme, lines).ID}
	page, err := acme.Files.List(ctx, openai.FileListParams{Order: openai.FileListParamsOrderAsc, Limit: openai.Int(1)})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	require.Equal(t, first.ID, page.Data[0].ID)

	c.advance(time.Hour)
	page, err = acme.Files.List(ctx, openai.FileListParams{Order: openai.FileListParamsOrderAsc, Limit: openai.Int(2), After: openai.String(first.ID)})
	require.NoError(t, err)
	var got []string
	for _, f := range page.Data {
		got = append(got, f.ID)
	}
	assert.ElementsMatch(t, rest, got)
}

// TestUploadFieldsAreNotCut: a form value longer than 64 bytes is a 400;
// it was cut there and the rest taken for the value.
func TestUploadFieldsAreNotCut(t *testing.T) {
	f := start(t, setup{})
	for _, field := range []struct{ name, value, param string }{
		{"purpose", "batch" + strings.Repeat(" ", 60) + "junk", "purpose"},
		{"expires_after[seconds]", "3600" + strings.Repeat(" ", 60) + "-5", "expires_after.seconds"},
	} {
		fields := []string{field.name, field.value}
		if field.name != "purpose" {
			fields = append([]string{"purpose", "batch", "expires_after[anchor]", "created_at"}, fields...)
		}
		status, e := rawUpload(t, f.url, chatLines(1, model, 4), fields...)
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Equal(t, field.param, e.Param)
		assert.Contains(t, e.Message, "longer than 64 bytes")
	}
}

// uploadError is an error answer's error object.
type uploadError struct{ Message, Code, Param string }

// rawUpload posts content as acme's file with the form fields (name,
// value, ...) before it, as no SDK would, and returns the status and the
// error, if any.
func rawUpload(t *testing.T, url, content string, fields ...string) (int, uploadError) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for i := 0; i+1 < len(fields); i += 2 {
		require.NoError(t, mw.WriteField(fields[i], fields[i+1]))
	}
	fw, err := mw.CreateFormFile("file", "in.jsonl")
	require.NoError(t, err)
	_, err = fw.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	req, err := http.NewRequest(http.MethodPost, url+"/v1/files", &body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var e struct{ Error uploadError }
	if res.StatusCode != http.StatusOK {
		require.NoError(t, json.NewDecoder(res.Body).Decode(&e))
	}
	return res.StatusCode, e.Error
}
