package measure

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTierWriterStampsEveryObject(t *testing.T) {
	stream := "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"a{b\"}}]}\n\n" +
		"data:{\"id\":\"2\",\"choices\":[]}\r\n\r\n" +
		"data: {}\n\n" + "data: { \t}\n\n" + "data: { \"id\":\"3\"}\n\n" +
		": comment {\n\n" +
		"data: [DONE]\n\n"
	for cut := 0; cut <= len(stream); cut++ { // every split of the stream into two writes
		rec := httptest.NewRecorder()
		tw := NewTierWriter(rec, "flex")
		tw.Header().Set("Content-Type", "text/event-stream")
		tw.WriteHeader(http.StatusOK)
		_, err := tw.Write([]byte(stream[:cut]))
		require.NoError(t, err)
		_, err = tw.Write([]byte(stream[cut:]))
		require.NoError(t, err)
		var objects int
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			line = strings.TrimSuffix(line, "\r")
			payload, ok := strings.CutPrefix(line, "data:")
			payload = strings.TrimSpace(payload)
			if !ok || !strings.HasPrefix(payload, "{") {
				continue
			}
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(payload), &v), "cut %d: %s", cut, payload)
			assert.Equal(t, "flex", v["service_tier"])
			objects++
		}
		assert.Equal(t, 5, objects)
		assert.Contains(t, rec.Body.String(), ": comment {\n", "comments untouched")
		assert.Contains(t, rec.Body.String(), "data: [DONE]\n\n")
	}
}

func TestTierWriterJSONAndErrors(t *testing.T) {
	rec := httptest.NewRecorder()
	tw := NewTierWriter(rec, "priority")
	tw.Header().Set("Content-Type", "application/json")
	tw.Header().Set("Content-Length", "99")
	tw.WriteHeader(http.StatusOK)
	_, _ = tw.Write([]byte(` {"id":"x","object":{"a":1}}`))
	var v map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	assert.Equal(t, "priority", v["service_tier"])
	assert.Empty(t, rec.Header().Get("Content-Length"))

	rec = httptest.NewRecorder()
	tw = NewTierWriter(rec, "priority")
	tw.Header().Set("Content-Type", "application/json")
	tw.WriteHeader(http.StatusBadRequest)
	_, _ = tw.Write([]byte(`{"error":{}}`))
	assert.Equal(t, `{"error":{}}`, rec.Body.String(), "errors are not stamped")
}

// An empty object gets the member and no comma: {} was answered as
// {"service_tier":"flex",}, which no JSON reader takes.
func TestTierWriterEmptyObject(t *testing.T) {
	for _, body := range []string{`{}`, `{ }`, "{\n}", `{ "a" : 1 }`, "{\n  \"a\": 1\n}"} {
		for cut := 0; cut <= len(body); cut++ {
			rec := httptest.NewRecorder()
			tw := NewTierWriter(rec, "flex")
			tw.Header().Set("Content-Type", "application/json")
			tw.WriteHeader(http.StatusOK)
			_, _ = tw.Write([]byte(body[:cut]))
			_, _ = tw.Write([]byte(body[cut:]))
			var v map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "%q cut at %d: %s", body, cut, rec.Body.String())
			assert.Equal(t, "flex", v["service_tier"])
		}
	}
}
