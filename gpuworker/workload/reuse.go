package workload

// IdealPrefixReuse returns the fraction of prompt tokens an infinite
// prefix cache could serve: replaying reqs in order, a token counts when
// its block, and every block before it in the prompt, appeared in an
// earlier request. It is the ceiling of any engine's or fleet's prefix-cache
// hit ratio on the workload (with one engine and no eviction), so a report
// can show how close a routing policy gets.
//
// Blocks are HashIDs at BlockTokens granularity; tokens past the last id
// never count. A partial last block counts the tokens earlier requests had
// of it. Engines cache whole blocks of 16 or so tokens and recompute the
// last prompt token, so their best is a little lower.
func IdealPrefixReuse(reqs []Request) float64 {
	type edge struct{ parent, id int }
	var (
		children   = map[edge]int{} // (parent node, block id) -> node
		seen       = []int{0}       // most tokens of the node's block seen; node 0 is the root
		total, hit int64
	)
	for _, r := range reqs {
		total += int64(r.PromptTokens)
		node := 0
		for i, id := range r.HashIDs {
			n := min(BlockTokens, r.PromptTokens-i*BlockTokens)
			if n <= 0 {
				break
			}
			e := edge{node, id}
			child, ok := children[e]
			if ok {
				hit += int64(min(n, seen[child]))
				seen[child] = max(seen[child], n)
			} else {
				child = len(seen)
				children[e] = child
				seen = append(seen, n)
			}
			node = child
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}
