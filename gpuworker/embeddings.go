package gpuworker

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
)

// defaultEmbeddingDims is the vector size when a request sets no dimensions.
const defaultEmbeddingDims = 64

// maxEmbeddingDims bounds the dimensions a request may ask for.
const maxEmbeddingDims = 8192

// handleEmbeddings answers at once with a unit vector derived from a hash of
// each input; it does not occupy the engine.
func (w *Worker) handleEmbeddings(rw http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if !w.readRequest(rw, r, &req, &req.Model) {
		return
	}
	dims := defaultEmbeddingDims
	if req.Dimensions != nil {
		dims = *req.Dimensions
		if dims < 1 || dims > maxEmbeddingDims {
			writeError(rw, invalidRequest("dimensions", "dimensions must be in [1, %d], got %d", maxEmbeddingDims, dims))
			return
		}
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		writeError(rw, invalidRequest("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", req.EncodingFormat))
		return
	}
	inputs, err := parsePrompts("input", req.Input)
	if err != nil {
		writeError(rw, err)
		return
	}
	resp := embeddingList{Object: "list", Model: w.model, Data: make([]embedding, len(inputs))}
	for i, in := range inputs {
		vec := embedVector(in.hash^uint64(w.seed), dims)
		resp.Data[i] = embedding{Object: "embedding", Index: i, Embedding: vec}
		if b64 {
			resp.Data[i].Embedding = encodeFloats(vec)
		}
		resp.Usage.PromptTokens += in.tokens
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(rw, http.StatusOK, resp)
}

// embedVector returns a deterministic unit vector for key.
func embedVector(key uint64, dims int) []float32 {
	vec := make([]float32, dims)
	var norm float64
	for i := range vec {
		v := float64(mix(key+uint64(i))>>11)/float64(1<<53)*2 - 1
		vec[i] = float32(v)
		norm += v * v
	}
	if norm > 0 {
		scale := float32(1 / math.Sqrt(norm))
		for i := range vec {
			vec[i] *= scale
		}
	}
	return vec
}

// encodeFloats is OpenAI's base64 form: little-endian float32s.
func encodeFloats(vec []float32) string {
	buf := make([]byte, 4*len(vec))
	for i, v := range vec {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(buf)
}
