package partlog

import (
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
)

// UndefinedEpoch and UndefinedOffset are what EndOffsetFor answers when it
// knows nothing of an epoch (Kafka's UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// EpochEntry says that leader epoch Epoch wrote its first record at
// StartOffset (KIP-101).
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochCache is Kafka's LeaderEpochFileCache: epoch → start offset, both
// strictly rising, saved to the leader-epoch-checkpoint file on every
// change. Guarded by the log's writer lock, read under its read lock.
type epochCache struct {
	path    string
	entries []EpochEntry // the writer's copy
	// view is a copy of entries for readers (a leader answering its
	// followers while it appends), replaced whole after each change.
	view atomic.Pointer[[]EpochEntry]
}

// publish gives readers the writer's entries.
func (c *epochCache) publish() {
	v := slices.Clone(c.entries)
	c.view.Store(&v)
}

func loadEpochCache(path string) (*epochCache, error) {
	es, _, err := readCheckpoint(path, 2)
	if err != nil {
		return nil, err
	}
	c := &epochCache{path: path}
	for i, e := range es {
		ee := EpochEntry{Epoch: int32(e[0]), StartOffset: e[1]}
		if e[0] < 0 || e[0] != int64(ee.Epoch) || ee.StartOffset < 0 ||
			(i > 0 && (ee.Epoch <= c.entries[i-1].Epoch || ee.StartOffset < c.entries[i-1].StartOffset)) {
			return nil, fmt.Errorf("partlog: %s: damaged checkpoint: entry %d (epoch %d, offset %d) does not rise", path, i, e[0], e[1])
		}
		c.entries = append(c.entries, ee)
	}
	c.publish()
	return c, nil
}

func (c *epochCache) save() error {
	c.publish()
	es := make([][]int64, len(c.entries))
	for i, e := range c.entries {
		es[i] = []int64{int64(e.Epoch), e.StartOffset}
	}
	return writeCheckpoint(c.path, es)
}

func (c *epochCache) latest() (EpochEntry, bool) {
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// assign records that epoch starts at start, unless the latest entry is
// already that epoch. Entries an assignment contradicts (a later or equal
// epoch, or a start at or after start) are dropped, as Kafka does; the
// log's callers never ask for a lower epoch than the latest.
func (c *epochCache) assign(epoch int32, start int64, persist bool) (bool, error) {
	if epoch < 0 || start < 0 {
		return false, fmt.Errorf("partlog: leader epoch %d at offset %d", epoch, start)
	}
	if l, ok := c.latest(); ok && l.Epoch == epoch && l.StartOffset <= start {
		return false, nil
	}
	for len(c.entries) > 0 {
		l := c.entries[len(c.entries)-1]
		if l.Epoch < epoch && l.StartOffset < start {
			break
		}
		c.entries = c.entries[:len(c.entries)-1]
	}
	c.entries = append(c.entries, EpochEntry{Epoch: epoch, StartOffset: start})
	if !persist {
		c.publish()
		return true, nil
	}
	return true, c.save()
}

// endOffsetFor is Kafka's endOffsetFor: the largest epoch at or below epoch
// and the offset where it ended (the next epoch's start, or leo for the
// latest). For an epoch below every entry it answers epoch and the first
// entry's start: the log before it is gone, and the follower must start
// where this log does.
func endOffsetFor(entries []EpochEntry, epoch int32, leo int64) (int32, int64) {
	if epoch == UndefinedEpoch {
		return UndefinedEpoch, UndefinedOffset
	}
	if n := len(entries); n > 0 && entries[n-1].Epoch == epoch {
		return epoch, leo
	}
	// the first entry with a higher epoch
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Epoch > epoch })
	if i == len(entries) {
		return UndefinedEpoch, UndefinedOffset
	}
	if i == 0 {
		return epoch, entries[0].StartOffset
	}
	return entries[i-1].Epoch, entries[i].StartOffset
}

// truncateFromEnd drops the entries starting at or after end.
func (c *epochCache) truncateFromEnd(end int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= end {
		n--
	}
	changed := n != len(c.entries)
	c.entries = c.entries[:n]
	return changed
}

// truncateFromStart drops the entries wholly before start; the last one at
// or before start now starts at start.
func (c *epochCache) truncateFromStart(start int64) bool {
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset <= start {
		i++
	}
	if i == 0 {
		return false
	}
	kept := EpochEntry{Epoch: c.entries[i-1].Epoch, StartOffset: start}
	changed := i > 1 || c.entries[0] != kept
	c.entries = append([]EpochEntry{kept}, c.entries[i:]...)
	return changed
}
