package bench

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// offsetLog notes when a broker first reached each offset: one mark per
// push (or applied batch), so the time at which it first had any offset X
// is found afterwards, exactly, without polling.
type offsetLog struct {
	cur   atomic.Uint64
	mu    sync.Mutex
	marks []mark // increasing offsets
}

type mark struct {
	offset uint64
	at     time.Time
}

// add notes that offset was reached at at; offsets at or below the current
// one change nothing.
func (l *offsetLog) add(offset uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset <= l.cur.Load() {
		return
	}
	l.marks = append(l.marks, mark{offset, at})
	l.cur.Store(offset)
}

// current is the highest offset reached.
func (l *offsetLog) current() uint64 { return l.cur.Load() }

// reachedAt is when the broker first had offset or a later one.
func (l *offsetLog) reachedAt(offset uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.marks), func(i int) bool { return l.marks[i].offset >= offset })
	if i == len(l.marks) {
		return time.Time{}, false
	}
	return l.marks[i].at, true
}
