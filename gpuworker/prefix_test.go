package gpuworker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHashTokenBlocksSharesPrefixes(t *testing.T) {
	a := make([]int, 50)
	for i := range a {
		a[i] = i
	}
	b := append([]int(nil), a...)
	b[40] = 999 // third block differs

	ha, hb := HashTokenBlocks(a), HashTokenBlocks(b)
	assert.Len(t, ha, 3, "partial block gets no hash")
	assert.Equal(t, ha[:2], hb[:2])
	assert.NotEqual(t, ha[2], hb[2])
	assert.Nil(t, HashTokenBlocks(a[:15]))

	c := append([]int(nil), a...)
	c[0] = -1
	hc := HashTokenBlocks(c)
	for i := range hc {
		assert.NotEqual(t, ha[i], hc[i], "a changed first block changes every hash (chaining)")
	}
}

func TestHashIDBlocks(t *testing.T) {
	h := HashIDBlocks([]int{7, 8, 9}, 1100)
	assert.Len(t, h, 1100/BlockSize)
	g := HashIDBlocks([]int{7, 8, 10}, 3*512)
	assert.Len(t, g, 96)
	assert.Equal(t, h[:64], g[:64], "equal id prefixes give equal hashes")
	assert.NotEqual(t, h[64], g[64])
	assert.Len(t, HashIDBlocks([]int{1}, 4096), 32, "no hashes beyond the ids")
	assert.Nil(t, HashIDBlocks(nil, 100))
	assert.Len(t, HashIDBlocks([]int{1, 2}, 0), 0)

	seen := map[uint64]bool{}
	for _, x := range h {
		assert.False(t, seen[x], "blocks within one prompt are distinct")
		seen[x] = true
	}
}

func TestHashAllocations(t *testing.T) {
	tokens := make([]int, 4096)
	ids := []int{1, 2, 3, 4, 5, 6, 7, 8}
	assert.LessOrEqual(t, testing.AllocsPerRun(10, func() { HashTokenBlocks(tokens) }), 1.0)
	assert.LessOrEqual(t, testing.AllocsPerRun(10, func() { HashIDBlocks(ids, 4096) }), 1.0)
}
