package fleet

import "github.com/sluice-llm/sluice/gpuworker"

// prefixStats returns the engine's prefix-cache queries and hits, in tokens
// (vLLM's prefix_cache_queries and prefix_cache_hits).
func prefixStats(l gpuworker.Load) (queries, hits int64) {
	return l.PrefixCacheQueries, l.PrefixCacheHits
}

// PrefixHashes appends to dst one chained hash per trace hash id (one per
// 512-token block of the prompt): hash i identifies ids[0..i], so two
// requests share their leading hashes exactly as far as they share leading
// blocks. These are what policies.Request.PrefixHashes carries in the
// simulator; the live router hashes prompt bytes instead, with the same
// equality structure.
func PrefixHashes(dst []uint64, ids []int) []uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, id := range ids {
		h ^= uint64(id) + 0x632be59bd9b4e019
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
		h *= 0x94d049bb133111eb
		h ^= h >> 29
		dst = append(dst, h)
	}
	return dst
}
