package fleet

import "github.com/sluice-llm/sluice/gpuworker"

// prefixStats returns the engine's prefix-cache queries and hits, in tokens
// (vLLM's prefix_cache_queries and prefix_cache_hits).
func prefixStats(l gpuworker.Load) (queries, hits int64) {
	return l.PrefixCacheQueries, l.PrefixCacheHits
}
