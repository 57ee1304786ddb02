package fleet

// stepHeap is an indexed binary min-heap of workers keyed by the virtual
// time (ns) of their next step end; ties break by worker index, which keeps
// runs deterministic. Every operation is O(log n) and allocation-free once
// built.
type stepHeap struct {
	items []int   // worker indices in heap order
	pos   []int   // pos[w] is w's index in items, or -1
	key   []int64 // key[w] is w's next time
}

func newStepHeap(workers int) *stepHeap {
	h := &stepHeap{
		items: make([]int, 0, workers),
		pos:   make([]int, workers),
		key:   make([]int64, workers),
	}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

func (h *stepHeap) len() int { return len(h.items) }

// top returns the worker with the earliest time and that time.
func (h *stepHeap) top() (int, int64) {
	w := h.items[0]
	return w, h.key[w]
}

// set inserts w at t or moves it there.
func (h *stepHeap) set(w int, t int64) {
	if i := h.pos[w]; i >= 0 {
		old := h.key[w]
		h.key[w] = t
		if t < old {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.key[w] = t
	h.pos[w] = len(h.items)
	h.items = append(h.items, w)
	h.up(len(h.items) - 1)
}

// remove takes w out of the heap if it is there.
func (h *stepHeap) remove(w int) {
	i := h.pos[w]
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	h.swap(i, last)
	h.items = h.items[:last]
	h.pos[w] = -1
	if i < last {
		h.down(i)
		h.up(i)
	}
}

func (h *stepHeap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.key[a] != h.key[b] {
		return h.key[a] < h.key[b]
	}
	return a < b
}

func (h *stepHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]] = i
	h.pos[h.items[j]] = j
}

func (h *stepHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *stepHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}
