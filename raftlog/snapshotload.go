package raftlog

import (
	"io"
	"sync/atomic"
	"time"
)

// SnapshotLoad is how far this node's state machine has read the snapshot
// it is restoring: the newest one in the data dir while Open starts raft
// (seconds, for a large image, before the node answers anything but its
// peers' start-up questions), or one a leader sent later. Safe for
// concurrent use; the zero value holds no restore.
type SnapshotLoad struct {
	loading    atomic.Bool
	read, size atomic.Int64
}

// Progress returns how many bytes of the snapshot being restored have been
// read, and its size (0 when unknown); ok is false when no restore is under
// way.
func (l *SnapshotLoad) Progress() (read, size int64, ok bool) {
	if l == nil || !l.loading.Load() {
		return 0, 0, false
	}
	return l.read.Load(), l.size.Load(), true
}

// begin starts a restore of a snapshot of size bytes and returns r counting
// into l. With pace above zero (a test's slow disk) reads are cut to a
// hundredth of the snapshot and spread over pace.
func (l *SnapshotLoad) begin(r io.Reader, size int64, pace time.Duration) io.Reader {
	l.read.Store(0)
	l.size.Store(size)
	l.loading.Store(true)
	return &loadReader{r: r, load: l, size: size, pace: pace, start: time.Now()}
}

// end says the restore is over, however it ended.
func (l *SnapshotLoad) end() { l.loading.Store(false) }

type loadReader struct {
	r     io.Reader
	load  *SnapshotLoad
	read  int64
	size  int64
	pace  time.Duration
	start time.Time
}

func (r *loadReader) Read(p []byte) (int, error) {
	if r.pace > 0 && r.size > 0 {
		if most := r.size/100 + 1; int64(len(p)) > most {
			p = p[:most]
		}
		// Not a wait for a condition: the test hook's simulated disk,
		// reading at size/pace bytes a second.
		time.Sleep(time.Until(r.start.Add(time.Duration(float64(r.pace) * float64(r.read) / float64(r.size)))))
	}
	n, err := r.r.Read(p)
	r.read += int64(n)
	r.load.read.Store(r.read)
	return n, err
}
