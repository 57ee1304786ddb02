package gpuworker

// queue is a FIFO of sequences backed by a ring buffer. Preempted sequences
// go back to the front, new ones to the back.
type queue struct {
	buf  []*seq
	head int
	n    int
}

func (q *queue) len() int { return q.n }

func (q *queue) at(i int) *seq { return q.buf[(q.head+i)%len(q.buf)] }

func (q *queue) grow() {
	if q.n < len(q.buf) {
		return
	}
	buf := make([]*seq, max(16, 2*len(q.buf)))
	for i := range q.n {
		buf[i] = q.at(i)
	}
	q.buf, q.head = buf, 0
}

func (q *queue) pushBack(s *seq) {
	q.grow()
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
}

func (q *queue) pushFront(s *seq) {
	q.grow()
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = s
	q.n++
}

// front returns the oldest sequence; the queue must not be empty.
func (q *queue) front() *seq { return q.buf[q.head] }

func (q *queue) popFront() *seq {
	s := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return s
}

// remove deletes s, keeping the order of the others. It is linear in the
// queue length, which is fine for cancellations.
func (q *queue) remove(s *seq) bool {
	for i := range q.n {
		if q.at(i) != s {
			continue
		}
		for j := i; j < q.n-1; j++ {
			q.buf[(q.head+j)%len(q.buf)] = q.at(j + 1)
		}
		q.buf[(q.head+q.n-1)%len(q.buf)] = nil
		q.n--
		return true
	}
	return false
}
