package fleet

import (
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// prefixStats returns the engine's prefix-cache queries and hits, in tokens
// (vLLM's prefix_cache_queries and prefix_cache_hits).
func prefixStats(l gpuworker.Load) (queries, hits int64) {
	return l.PrefixCacheQueries, l.PrefixCacheHits
}

// The live router hashes a prompt in chunks of 256 bytes, at most 64 of
// them (router/prefix.go), and sluice-bench load sends prompts as JSON lists
// of token ids in [1000, 30000): 5.7 bytes per token on average with the
// comma. So each of the router's hashes covers about ChunkTokens more
// tokens, and the simulator hands policies the hashes the live router would
// compute for the same request; a policy's prefix depth then means the same
// prompt length in both.
const (
	ChunkTokens = 45
	MaxChunks   = 64
)

// PrefixHashes appends to dst the prefix hashes of a prompt of prompt
// tokens whose leading 512-token blocks are the trace's hash ids (the rest
// unique to the request, as sluice-bench load builds prompts): one per
// whole ChunkTokens-token chunk, at most MaxChunks. Hash k identifies the
// prompt's tokens up to the end of chunk k, so two requests share it
// exactly when they share the blocks those tokens lie in, and a chunk that
// reaches past the hash ids is unique to the request (unique distinguishes
// requests; pass the request's index).
func PrefixHashes(dst []uint64, ids []int, prompt int, unique uint64) []uint64 {
	n := min(prompt/ChunkTokens, MaxChunks)
	h := uint64(0x9e3779b97f4a7c15)
	for k := range n {
		last := ((k+1)*ChunkTokens - 1) / workload.BlockTokens // block of the chunk's last token
		if last < len(ids) {
			h = mix(h ^ (uint64(ids[last]) + 0x632be59bd9b4e019))
		} else {
			h = mix(h ^ (unique + 0x2545f4914f6cdd1d) ^ uint64(k)<<48)
		}
		dst = append(dst, mix(h+uint64(k)))
	}
	return dst
}

// mix is SplitMix64's finalizer.
func mix(h uint64) uint64 {
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return h
}
