package jsonscan

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"
)

// Media inlined as a data URL ("data:image/png;base64,...": an image_url
// part's url, a file part's file_data) is not text: a backend turns a
// 1 MB image into a few hundred or thousand tokens, not the 350,000 its
// base64 would count at BytesPerToken (a tenant's vision request was
// refused as larger than its burst, and routed as a prompt of that size).
const (
	// ImagePatch: an image counts one token per ImagePatch × ImagePatch
	// pixels, as Qwen2-VL's encoder makes them (LLaVA-1.5 makes 576 for
	// any image, GPT-4o 765 for a 1024×1024 one in high detail).
	ImagePatch = 28
	// MaxImageTokens caps an image's count (encoders resize large images).
	MaxImageTokens = 16384
	// MinImageTokens is the least an image counts.
	MinImageTokens = 64
	// UnknownImageTokens is an image whose size cannot be read from its
	// header (a format other than PNG, JPEG and GIF, or a broken one):
	// that of a 896×896 image.
	UnknownImageTokens = 1024
	// BytesPerMediaToken: other inline media (audio, documents) count one
	// token per this many decoded bytes (16-bit 16 kHz audio: 32 tokens a
	// second, about what audio encoders make).
	BytesPerMediaToken = 1000
)

// minMediaString is the shortest JSON string read as a data URL; shorter
// ones count as text (a test's tiny image costs nothing either way).
const minMediaString = 128

// valueTokens is ApproxTokens of the JSON string s, quotes included: one
// token per BytesPerToken bytes, or mediaTokens for a data URL.
func valueTokens(s []byte) int {
	if len(s) >= minMediaString && s[1] == 'd' {
		if n, ok := mediaTokens(s[1 : len(s)-1]); ok {
			return n
		}
	}
	return stringTokens(len(s))
}

// mediaTokens estimates a base64 data URL's tokens (v is the string's
// raw contents); ok is false when v is not one.
func mediaTokens(v []byte) (n int, ok bool) {
	rest, found := bytes.CutPrefix(v, []byte("data:"))
	if !found {
		return 0, false
	}
	comma := bytes.IndexByte(rest[:min(len(rest), 256)], ',')
	if comma < 0 {
		return 0, false
	}
	header := rest[:comma]
	if bytes.IndexByte(header, '\\') >= 0 { // JSON may escape its slash: "image\/png"
		header = bytes.ReplaceAll(header, []byte(`\`), nil)
	}
	mime, found := bytes.CutSuffix(header, []byte(";base64"))
	if !found {
		return 0, false
	}
	if i := bytes.IndexByte(mime, ';'); i >= 0 {
		mime = mime[:i] // parameters before ;base64 (charset=...)
	}
	data := rest[comma+1:]
	kind, sub, _ := strings.Cut(strings.ToLower(string(mime)), "/")
	if kind != "image" {
		return max(base64.StdEncoding.DecodedLen(len(data))/BytesPerMediaToken, 1), true
	}
	return imageTokens(sub, data), true
}

// imageTokens reads an image's size from its header, decoding only as
// much base64 as the header takes.
func imageTokens(format string, data []byte) int {
	var decode func(io.Reader) (image.Config, error)
	switch format {
	case "png":
		decode = png.DecodeConfig
	case "jpeg", "jpg", "pjpeg":
		decode = jpeg.DecodeConfig
	case "gif":
		decode = gif.DecodeConfig
	default:
		return UnknownImageTokens
	}
	// JSON may escape the base64's slashes ("\/"): drop the backslashes.
	cfg, err := decode(base64.NewDecoder(base64.StdEncoding, &unescaper{b: data}))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return UnknownImageTokens
	}
	w := (cfg.Width + ImagePatch - 1) / ImagePatch
	h := (cfg.Height + ImagePatch - 1) / ImagePatch
	if w > MaxImageTokens || h > MaxImageTokens { // no overflow below
		return MaxImageTokens
	}
	return min(max(w*h, MinImageTokens), MaxImageTokens)
}

// unescaper reads b without its backslashes.
type unescaper struct{ b []byte }

func (u *unescaper) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(u.b) > 0 {
		if c := u.b[0]; c != '\\' {
			p[n] = c
			n++
		}
		u.b = u.b[1:]
	}
	if n == 0 && len(u.b) == 0 {
		return 0, io.EOF
	}
	return n, nil
}
