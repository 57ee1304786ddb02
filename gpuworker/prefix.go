package gpuworker

// Block hashing for the prefix cache. Hashes are chained: the hash of block i
// mixes the hash of block i-1 with block i's contents, so a hash identifies
// the whole prefix up to the end of its block, and two prompts share their
// leading hashes exactly as far as they share full blocks.

// HashIDBlockTokens is the number of prompt tokens one trace hash id covers
// (Mooncake traces use 512-token hash ids).
const HashIDBlockTokens = 512

// blocksPerHashID is how many engine blocks one trace hash id expands to.
const blocksPerHashID = HashIDBlockTokens / BlockSize

// FNV-1a 64-bit parameters, applied to whole 64-bit words rather than bytes
// and followed by a final avalanche, which is plenty for cache keys.
const (
	fnvOffset uint64 = 0xcbf29ce484222325
	fnvPrime  uint64 = 0x100000001b3
)

// mix64 folds one word into a running FNV-1a style state.
func mix64(h, v uint64) uint64 {
	h ^= v
	return h * fnvPrime
}

// finish spreads the bits of a hash state (the splitmix64 finaliser), so
// that chained hashes of similar inputs differ in every bit.
func finish(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// domain tags keep token-derived and id-derived hashes apart.
const (
	domainTokens uint64 = 0x746f6b656e73 // "tokens"
	domainIDs    uint64 = 0x686173686964 // "hashid"
)

// HashTokenBlocks returns one chained hash per full 16-token block of tokens:
// hash i covers tokens[0:(i+1)*16], so equal prefixes give equal leading
// hashes. A trailing partial block gets no hash. It allocates only the
// result.
func HashTokenBlocks(tokens []int) []uint64 {
	n := len(tokens) / BlockSize
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	prev := domainTokens
	for i := range n {
		h := mix64(fnvOffset, prev)
		for _, t := range tokens[i*BlockSize : (i+1)*BlockSize] {
			h = mix64(h, uint64(t))
		}
		prev = finish(h)
		out[i] = prev
	}
	return out
}

// HashIDBlocks returns the engine block hashes for a trace prompt described
// by 512-token hash ids (Mooncake style): each id expands to 32 chained
// 16-token block hashes, truncated to promptTokens/16 full blocks; equal id
// prefixes give equal block-hash prefixes. Blocks past the last id get no
// hash. It allocates only the result.
func HashIDBlocks(ids []int, promptTokens int) []uint64 {
	n := min(promptTokens/BlockSize, len(ids)*blocksPerHashID)
	if n <= 0 {
		return nil
	}
	out := make([]uint64, n)
	prev := domainIDs
	for i := range n {
		h := mix64(fnvOffset, prev)
		h = mix64(h, uint64(ids[i/blocksPerHashID]))
		h = mix64(h, uint64(i%blocksPerHashID))
		prev = finish(h)
		out[i] = prev
	}
	return out
}
