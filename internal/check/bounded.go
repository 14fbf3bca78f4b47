package check

// Bounded stands for a resource that at most Limit holders may use at once,
// under a semaphore: holders call Enter with their permit's fencing token
// when they start and Exit when they stop. Every permit granted mints its
// own token, so a token shown twice means a grant was handed out twice.
type Bounded struct {
	Limit int

	counts[BoundedResult]
	inside int
	seen   map[uint64]bool
}

// Enter records a holder starting, with its permit's token.
func (b *Bounded) Enter(token uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = make(map[uint64]bool)
	}
	if b.seen[token] {
		b.r.Repeated++
	}
	b.seen[token] = true
	b.inside++
	b.r.Most = max(b.r.Most, b.inside)
	if b.inside > b.Limit {
		b.r.Over++
	}
}

// Exit records a holder stopping.
func (b *Bounded) Exit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inside--
	b.r.Completed++
}

// BoundedResult is what a Bounded saw.
type BoundedResult struct {
	Completed int // holds that ended
	Most      int // the most holders inside at once
	Over      int // entries that made the holders more than Limit
	Repeated  int // entries with a token already shown
}
