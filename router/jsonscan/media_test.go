package jsonscan

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dataURL encodes a w×h image of noise in format as a data URL.
func dataURL(t testing.TB, format string, w, h int) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7919 % 251)
	}
	var buf bytes.Buffer
	switch format {
	case "png":
		require.NoError(t, png.Encode(&buf, img))
	case "jpeg":
		require.NoError(t, jpeg.Encode(&buf, img, nil))
	case "gif":
		require.NoError(t, gif.Encode(&buf, img, nil))
	}
	return "data:image/" + format + ";base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestInlineMediaCountsAsMediaNotBase64(t *testing.T) {
	png1024x768 := dataURL(t, "png", 1024, 768)
	audio := "data:audio/wav;base64," + base64.StdEncoding.EncodeToString(make([]byte, 64000))
	tests := []struct {
		name string
		v    string
		want int
	}{
		{"a PNG: one token per 28×28 pixels", png1024x768, 37 * 28},
		{"a JPEG", dataURL(t, "jpeg", 640, 480), 23 * 18},
		{"a small GIF counts the least an image does", dataURL(t, "gif", 100, 100), MinImageTokens},
		{"JSON's escaped slashes", strings.ReplaceAll(png1024x768, "/", `\/`), 37 * 28},
		{"a format whose size is not read", "data:image/webp;base64," + strings.Repeat("UklGR", 100), UnknownImageTokens},
		{"a broken image", "data:image/png;base64," + strings.Repeat("AAAA", 100), UnknownImageTokens},
		{"audio, by its decoded bytes", audio, 64},
		{"a MIME parameter before ;base64", "data:image/png;name=x.png;base64," + strings.TrimPrefix(png1024x768, "data:image/png;base64,"), 37 * 28},
		{"text that looks like a data URL is text", "data:image/png," + strings.Repeat("x", 400), (len("data:image/png,") + 400 + 3) / 4},
		{"a short data URL is text", "data:image/png;base64,AAAA", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := []byte(`"` + tt.v + `"`)
			assert.Equal(t, tt.want, ApproxTokens(v))
			// A chat message with the image as OpenAI's SDKs send it: the
			// image, plus the text and framing, counted alike by the check.
			msg := []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":` + string(v) + `}}]}]}`)
			var got int
			require.True(t, ObjectTokens(msg, func(key, val []byte, n int) { got = n }))
			assert.Equal(t, ApproxTokens(msg[len(`{"messages":`):len(msg)-1]), got)
			assert.Greater(t, got, tt.want)
			assert.Less(t, got, tt.want+20)
		})
	}
	// A GIF's header alone: 8,000 × 4,000 pixels.
	huge := append([]byte("GIF89a\x40\x1f\xa0\x0f\x00\x00\x00"), make([]byte, 120)...)
	assert.Equal(t, MaxImageTokens, ApproxTokens([]byte(`"data:image/gif;base64,`+base64.StdEncoding.EncodeToString(huge)+`"`)), "capped")
}
