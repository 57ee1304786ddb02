package gpuworker

// blockPool is the paged KV cache with automatic prefix caching, after
// vLLM's block pool. A block is either in use (ref > 0, held by one or more
// running sequences) or free. Free blocks are of three kinds, taken in this
// order when a sequence needs space:
//
//   - empty: freed blocks with no hash, kept on a stack;
//   - fresh: never used, only counted, so a huge pool (the instant profile)
//     costs nothing until it is used;
//   - cached: freed blocks whose hash is registered, on an LRU list; taking
//     one evicts its hash. A cached block can also be revived by a cache hit.
//
// Per-block state lives in parallel slices indexed by block id that grow as
// blocks are first used, so the steady state allocates nothing.
type blockPool struct {
	total int
	fresh int

	ref    []int32
	hash   []uint64
	hashed []bool
	// prev and next link the LRU list of cached free blocks; -1 ends it.
	prev, next []int32
	lruHead    int32
	lruTail    int32
	lruLen     int

	empty  []int32
	byHash map[uint64]int32
}

const noBlock int32 = -1

func newBlockPool(total int) *blockPool {
	return &blockPool{
		total:   total,
		fresh:   total,
		lruHead: noBlock,
		lruTail: noBlock,
		byHash:  make(map[uint64]int32),
	}
}

// free returns the number of blocks that can be handed out, counting cached
// blocks that would be evicted.
func (p *blockPool) free() int { return p.fresh + len(p.empty) + p.lruLen }

// used returns the number of blocks held by sequences; a shared block counts
// once.
func (p *blockPool) used() int { return p.total - p.free() }

// lookup returns the cached block for hash h.
func (p *blockPool) lookup(h uint64) (int32, bool) {
	b, ok := p.byHash[h]
	return b, ok
}

// alloc hands out one block with ref 1; free() must be positive.
func (p *blockPool) alloc() int32 {
	var b int32
	switch {
	case len(p.empty) > 0:
		b = p.empty[len(p.empty)-1]
		p.empty = p.empty[:len(p.empty)-1]
	case p.fresh > 0:
		b = int32(len(p.ref))
		p.fresh--
		p.ref = append(p.ref, 0)
		p.hash = append(p.hash, 0)
		p.hashed = append(p.hashed, false)
		p.prev = append(p.prev, noBlock)
		p.next = append(p.next, noBlock)
	default:
		b = p.lruHead
		p.unlink(b)
		p.unregister(b)
	}
	p.ref[b] = 1
	return b
}

// share adds a reference to a cached block found by lookup.
func (p *blockPool) share(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

// release drops one reference; a block nobody holds becomes free, keeping
// its hash (if any) until its space is needed.
func (p *blockPool) release(b int32) {
	p.ref[b]--
	if p.ref[b] > 0 {
		return
	}
	if !p.hashed[b] {
		p.empty = append(p.empty, b)
		return
	}
	p.prev[b], p.next[b] = p.lruTail, noBlock
	if p.lruTail != noBlock {
		p.next[p.lruTail] = b
	} else {
		p.lruHead = b
	}
	p.lruTail = b
	p.lruLen++
}

// register records that block b holds the prefix with hash h. If another
// block already holds it (two sequences computed the same prefix at once),
// b stays unhashed and is simply not reusable.
func (p *blockPool) register(b int32, h uint64) {
	if p.hashed[b] {
		return
	}
	if _, ok := p.byHash[h]; ok {
		return
	}
	p.byHash[h] = b
	p.hash[b] = h
	p.hashed[b] = true
}

func (p *blockPool) unregister(b int32) {
	if !p.hashed[b] {
		return
	}
	delete(p.byHash, p.hash[b])
	p.hashed[b] = false
	p.hash[b] = 0
}

func (p *blockPool) unlink(b int32) {
	pr, nx := p.prev[b], p.next[b]
	if pr != noBlock {
		p.next[pr] = nx
	} else {
		p.lruHead = nx
	}
	if nx != noBlock {
		p.prev[nx] = pr
	} else {
		p.lruTail = pr
	}
	p.prev[b], p.next[b] = noBlock, noBlock
	p.lruLen--
}

// cachedBlocks returns how many free blocks still hold a reusable prefix.
func (p *blockPool) cachedBlocks() int { return p.lruLen }
