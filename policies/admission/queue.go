package admission

import "errors"

// Item is one waiting request as the Queue orders it.
type Item struct {
	// Class and TierPriority order first: a better class always goes
	// before a worse one, then a higher tier priority before a lower.
	Class        Class
	TierPriority int
	// Tenant names whose share of service the item counts against; Weight
	// is the tenant's weight (values below 1 count as 1); Tokens is the
	// request's estimated cost in tokens (prompt plus expected output).
	Tenant string
	Weight float64
	Tokens int64
	// Value is the caller's: the live Gate keeps its waiter here, the
	// simulator its request index.
	Value any

	seq   uint64
	index int // position in its tenant's FIFO ring, for removal; -1 out
	lane  *lane
}

// ErrFull is Push's refusal when the queue is full of items as good as
// the new one.
var ErrFull = errors.New("admission: queue full")

// Queue orders waiting requests: by class, then tier priority, then
// between the tenants of that class and priority by the least weighted
// tokens served (start-time fair queueing: a tenant that comes back from
// idle starts level with the least-served waiting tenant, so it does not
// bank credit), then by arrival. It is not safe for concurrent use; the
// Gate guards it with its lock.
type Queue struct {
	max    int
	n      int
	seq    uint64
	levels []*level // sorted best first
}

// level holds the items of one (class, tier priority).
type level struct {
	class    Class
	priority int
	lanes    map[string]*lane
	served   map[string]float64 // weighted tokens served, per tenant, kept while the level lives
	vtime    float64            // the served count of the last tenant served: the level's virtual time
	n        int
}

// lane is one tenant's FIFO within a level.
type lane struct {
	tenant string
	items  []*Item
	head   int
	count  int // items not removed
}

// NewQueue returns a queue holding at most max items (max >= 1).
func NewQueue(max int) *Queue {
	if max < 1 {
		max = 1
	}
	return &Queue{max: max}
}

// Len is the number of waiting items.
func (q *Queue) Len() int { return q.n }

// Push adds it. When the queue is full it sheds the worst waiting item
// (worst class, then lowest tier priority, then newest) if that one is
// worse than it, and returns the shed item; when none is worse, it
// returns ErrFull and it does not enter.
func (q *Queue) Push(it *Item) (shed *Item, err error) {
	if q.n >= q.max {
		w := q.worst()
		if w == nil || !worse(w, it) {
			return nil, ErrFull
		}
		q.Remove(w)
		shed = w
	}
	q.seq++
	it.seq = q.seq
	lv := q.level(it.Class, it.TierPriority)
	ln := lv.lanes[it.Tenant]
	if ln == nil {
		ln = &lane{tenant: it.Tenant}
		lv.lanes[it.Tenant] = ln
	}
	if ln.len() == 0 {
		// Back from idle: start no lower than the level's virtual time
		// (where service had got to when it was last given out) nor the
		// least-served waiting tenant, so an idle spell banks no credit,
		// also after the queue ran empty.
		floor := lv.vtime
		if m, ok := lv.minServed(); ok && m > floor {
			floor = m
		}
		if lv.served[it.Tenant] < floor {
			lv.served[it.Tenant] = floor
		}
	}
	it.lane = ln
	it.index = len(ln.items)
	ln.items = append(ln.items, it)
	ln.count++
	lv.n++
	q.n++
	return shed, nil
}

// worse reports whether a orders after b for shedding.
func worse(a, b *Item) bool {
	if a.Class != b.Class {
		return a.Class > b.Class
	}
	return a.TierPriority < b.TierPriority
}

// Peek returns the item that goes next, or nil.
func (q *Queue) Peek() *Item { return q.peekSkipping(nil) }

// PeekPast is the item that goes next while the items in held (each the
// front of its tenant's lane, waiting on for a reason of their own) wait
// on: the next of another lane of their class and tier priority only if
// its tenant has been served less than each held one's tenant would be
// once that item is (its tokens counted), so that passing them gives it no
// more than a request's worth ahead of its share; nil when none such goes
// next. A worse class or tier priority does not pass them.
func (q *Queue) PeekPast(held []*Item) *Item { return q.peekPast(nil, held) }

// peekPast is PeekPast over the lanes not in skip either.
func (q *Queue) peekPast(skip map[*lane]bool, held []*Item) *Item {
	if len(held) == 0 {
		return q.peekSkipping(skip)
	}
	all := make(map[*lane]bool, len(skip)+len(held))
	for ln := range skip {
		all[ln] = true
	}
	for _, h := range held {
		all[h.lane] = true
	}
	it := q.peekSkipping(all)
	if it == nil {
		return nil
	}
	lv := q.level(it.Class, it.TierPriority)
	for _, h := range held {
		if it.Class > h.Class || it.Class == h.Class && it.TierPriority < h.TierPriority {
			return nil // a worse class or tier priority waits behind it as before
		}
		if h.Class == it.Class && h.TierPriority == it.TierPriority &&
			lv.served[it.Tenant] >= lv.served[h.Tenant]+weighted(h.Tokens, h.Weight) {
			return nil
		}
	}
	return it
}

// peekSkipping is Peek over the lanes (a class, tier priority and
// tenant's requests) not in skip.
func (q *Queue) peekSkipping(skip map[*lane]bool) *Item {
	for _, lv := range q.levels {
		if lv.n == 0 {
			continue
		}
		var best *lane
		for _, ln := range lv.lanes {
			if ln.len() == 0 || skip[ln] {
				continue
			}
			if best == nil || lv.served[ln.tenant] < lv.served[best.tenant] ||
				(lv.served[ln.tenant] == lv.served[best.tenant] && ln.front().seq < best.front().seq) {
				best = ln
			}
		}
		if best != nil {
			return best.front()
		}
	}
	return nil
}

// Pop removes and returns the item that goes next, or nil, and counts its
// tokens as served to its tenant.
func (q *Queue) Pop() *Item {
	it := q.Peek()
	if it == nil {
		return nil
	}
	q.take(it)
	return it
}

// Take removes it, which is in the queue, and counts its tokens as served
// to its tenant (Pop for an item PeekPast returned).
func (q *Queue) Take(it *Item) { q.take(it) }

// take removes it, which is in the queue, and counts its tokens as served
// to its tenant.
func (q *Queue) take(it *Item) {
	q.Remove(it)
	lv := q.level(it.Class, it.TierPriority)
	lv.vtime = max(lv.vtime, lv.served[it.Tenant])
	lv.served[it.Tenant] += weighted(it.Tokens, it.Weight)
}

// weighted is what a request of tokens counts against its tenant's share
// of service: its tokens over the tenant's weight (values below 1 count
// as 1).
func weighted(tokens int64, weight float64) float64 { return float64(tokens) / max(weight, 1) }

// Remove takes it out of the queue (a client that left, a shed request);
// it does nothing for an item not in the queue.
func (q *Queue) Remove(it *Item) {
	ln := it.lane
	if ln == nil || it.index < 0 || it.index >= len(ln.items) || ln.items[it.index] != it {
		return
	}
	ln.items[it.index] = nil
	ln.count--
	it.index = -1
	it.lane = nil
	for ln.head < len(ln.items) && ln.items[ln.head] == nil {
		ln.head++
	}
	if ln.head == len(ln.items) {
		ln.items, ln.head = ln.items[:0], 0
	}
	lv := q.level(it.Class, it.TierPriority)
	lv.n--
	q.n--
}

// Served is the weighted tokens the queue has served tenant at class and
// tier priority.
func (q *Queue) Served(c Class, tierPriority int, tenant string) float64 {
	return q.level(c, tierPriority).served[tenant]
}

// worst is the item shed first: the newest of the worst class and lowest
// tier priority.
func (q *Queue) worst() *Item {
	for i := len(q.levels) - 1; i >= 0; i-- {
		lv := q.levels[i]
		if lv.n == 0 {
			continue
		}
		var w *Item
		for _, ln := range lv.lanes {
			for j := len(ln.items) - 1; j >= ln.head; j-- {
				if it := ln.items[j]; it != nil {
					if w == nil || it.seq > w.seq {
						w = it
					}
					break
				}
			}
		}
		return w
	}
	return nil
}

// level finds or makes the level of (c, p), keeping levels best first.
func (q *Queue) level(c Class, p int) *level {
	i := 0
	for ; i < len(q.levels); i++ {
		lv := q.levels[i]
		if lv.class == c && lv.priority == p {
			return lv
		}
		if lv.class > c || (lv.class == c && lv.priority < p) {
			break
		}
	}
	lv := &level{class: c, priority: p, lanes: map[string]*lane{}, served: map[string]float64{}}
	q.levels = append(q.levels, nil)
	copy(q.levels[i+1:], q.levels[i:])
	q.levels[i] = lv
	return lv
}

func (lv *level) minServed() (float64, bool) {
	found := false
	var m float64
	for t, ln := range lv.lanes {
		if ln.len() == 0 {
			continue
		}
		if s := lv.served[t]; !found || s < m {
			m, found = s, true
		}
	}
	return m, found
}

func (ln *lane) len() int { return ln.count }

func (ln *lane) front() *Item {
	for _, it := range ln.items[ln.head:] {
		if it != nil {
			return it
		}
	}
	return nil
}
