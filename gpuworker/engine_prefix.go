package gpuworker

// cacheHit returns how many leading blocks of s the prefix cache holds and
// how many of those are free (cached but unreferenced), whose reuse takes
// them off the free list. Like vLLM it never lets the whole known sequence
// hit: at least one token is left to compute, so the hit stops before the
// block holding the last known token.
func (e *Engine) cacheHit(s *seq) (hit, revive int) {
	limit := min(len(s.hashes), (s.known()-1)/BlockSize)
	for hit < limit {
		b, ok := e.kv.lookup(s.hashes[hit])
		if !ok {
			break
		}
		if e.kv.ref[b] == 0 {
			revive++
		}
		hit++
	}
	return hit, revive
}

// admit moves s from the queue into the batch: it shares the first hit
// cached blocks, allocates the rest for all its known tokens, and counts
// the prefix-cache query and hit in tokens. The caller has checked that the
// blocks are free.
func (e *Engine) admit(s *seq, hit int) {
	s.state = stateRunning
	if want := blocksFor(s.prompt + s.output); cap(s.blocks) < want {
		s.blocks = make([]int32, 0, want) // once per request, so decode steps never grow it
	}
	for i := range hit {
		b, _ := e.kv.lookup(s.hashes[i])
		e.kv.share(b)
		s.blocks = append(s.blocks, b)
	}
	for len(s.blocks) < blocksFor(s.known()) {
		s.blocks = append(s.blocks, e.kv.alloc())
	}
	s.computed = hit * BlockSize
	s.hashed = hit
	if s.hashes != nil {
		e.cacheQueries += int64(s.known())
		e.cacheHits += int64(s.computed)
	}
}

// registerBlocks publishes the hashes of the prompt blocks of s that are now
// fully computed, so later requests can reuse them.
func (e *Engine) registerBlocks(s *seq) {
	upto := min(s.computed/BlockSize, len(s.hashes), len(s.blocks))
	for ; s.hashed < upto; s.hashed++ {
		e.kv.register(s.blocks[s.hashed], s.hashes[s.hashed])
	}
}

// release returns the blocks of s to the pool, last block first, so that a
// prompt's tail is evicted before its head (which more requests share).
func (e *Engine) release(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.kv.release(s.blocks[i])
	}
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	s.hashed = 0
}
