package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// What a controller knows of its own image's integrity.
//
// A leader never proposes a batch its state machine refuses (every decision
// is applied to a speculative image first), and Apply is deterministic, so
// every node that applies a committed entry reaches the same image. A node
// whose FSM refuses a committed entry anyway, or accepts one the others
// refused, holds another image than the quorum's: its log is fine, its
// image is not (a binary too old for the log, a bug, a damaged snapshot).
// Such a node must stop acting on its image, as a KRaft standby controller
// that cannot replay a committed record stops. Two things tell:
//
//   - the refusal itself: the FSM records the first committed entry it
//     refused (Divergence), and
//   - a digest of what each node applied, compared at the same index across
//     the voters (etcd's corruption check): a rolling SHA-256 over every
//     committed command entry the FSM was given, its index, term and bytes
//     and whether it accepted it. A node that refused or accepted an entry
//     the others did not differs from then on. Every node's chain starts at
//     the empty image (index 0); a node that restored a snapshot without a
//     chain (one written before digests were carried) starts a new one at
//     the next entry that moves the controller epoch, as every such node
//     does, and chains are compared only with chains that started at the
//     same index (Digest.Start).
//
// The chain is carried in the node's raft snapshots (the header's digest
// fields), so that a node restarting from its snapshot, or installing one
// from the leader, continues it; and so is a divergence, so that a node
// does not act again on an image it stopped trusting once it has taken a
// snapshot of it.

// digestRing is how many recent digests an FSM keeps, to answer at the
// index the active controller asks about: entries applied in a few seconds
// at the highest write rates Keel reaches, far more than a voter applies
// between the leader reading its own digest and asking.
const digestRing = 4096

// Digest is the rolling digest of the entries an FSM applied, as of the
// entry at Index, of a chain that started at the entry at Start (0: the
// empty image). Only digests of chains that started at the same index are
// comparable.
type Digest struct {
	Start, Index uint64
	Sum          [sha256.Size]byte
}

// String shows the index and the first bytes of the sum, enough to tell
// digests apart in a log line.
func (d Digest) String() string { return fmt.Sprintf("%x@%d(from %d)", d.Sum[:6], d.Index, d.Start) }

// Divergence is why an FSM's image is not to be acted on: the committed
// entry it refused, or the index at which its digest differed from the
// majority's.
type Divergence struct {
	Index  uint64
	Reason string
}

// foldDigest is the digest after applying the entry at (index, term) with
// data to a chain at prev (zero for a new chain).
func foldDigest(prev [sha256.Size]byte, index, term uint64, accepted bool, data []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(prev[:])
	var pos [17]byte
	binary.BigEndian.PutUint64(pos[0:8], index)
	binary.BigEndian.PutUint64(pos[8:16], term)
	if accepted {
		pos[16] = 1
	}
	h.Write(pos[:])
	h.Write(data)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// digests is an FSM's chain and the recent digests it answers from. The
// FSM's goroutine folds entries in; any goroutine reads.
type digests struct {
	mu    sync.Mutex
	known bool // false after a snapshot that carried no chain, until an entry moves the controller epoch
	last  Digest
	ring  []Digest // the recent digests, a ring from head, oldest first
	head  int
}

// fold adds the entry at (index, term) to the chain. epochMoved: the entry
// moved the controller epoch, where an unknown chain starts.
func (d *digests) fold(index, term uint64, accepted, epochMoved bool, data []byte) {
	// Only the FSM's goroutine writes d, so it reads known and last without
	// the lock, and hashes without holding it.
	next := d.last
	if !d.known {
		if !epochMoved {
			return
		}
		next = Digest{Start: index}
	}
	next.Index, next.Sum = index, foldDigest(next.Sum, index, term, accepted, data)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.known = true
	d.last = next
	if len(d.ring) < digestRing {
		d.ring = append(d.ring, d.last)
		return
	}
	d.ring[d.head] = d.last
	d.head = (d.head + 1) % digestRing
}

// reset starts the chain at what a snapshot carried: at, or unknown when
// it carried none.
func (d *digests) reset(at *Digest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ring, d.head = d.ring[:0], 0
	d.known, d.last = at != nil, Digest{}
	if at != nil {
		d.last = *at
		d.ring = append(d.ring, *at)
	}
}

// latest returns the newest digest, or false while the chain is unknown.
func (d *digests) latest() (Digest, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last, d.known
}

// ErrDigestNotApplied is wrapped by DigestAt's error for an index the FSM
// has not applied yet: asking again later may find it.
var ErrDigestNotApplied = errors.New("not applied yet")

// at returns the digest as of the entry at index, or why there is none.
func (d *digests) at(index uint64) (Digest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !d.known:
		return Digest{}, errors.New("no digest since this node restored a snapshot that carried none (until the next change of controller epoch)")
	case index > d.last.Index:
		return Digest{}, fmt.Errorf("%w: its latest digest is at index %d", ErrDigestNotApplied, d.last.Index)
	}
	for i := range d.ring {
		if e := d.ring[i]; e.Index == index {
			return e, nil
		}
	}
	oldest := d.ring[d.head%len(d.ring)].Index
	if index < oldest {
		return Digest{}, fmt.Errorf("index %d is older than the digests it keeps (from index %d)", index, oldest)
	}
	return Digest{}, fmt.Errorf("index %d is no entry it applied (a raft configuration change, or inside a snapshot it installed)", index)
}

// divergence is an FSM's Divergence, set once.
type divergence struct {
	d    atomic.Pointer[Divergence]
	done chan struct{} // closed when d is set
}

// mark records why the image diverged; only the first reason is kept. It
// reports whether this call recorded it.
func (v *divergence) mark(index uint64, reason string) bool {
	if !v.d.CompareAndSwap(nil, &Divergence{Index: index, Reason: reason}) {
		return false
	}
	close(v.done)
	return true
}

// Diverged returns why this FSM's image is not to be acted on, or nil: the
// first committed entry it refused, a digest that differed from the
// majority's (MarkDiverged), or a divergence its snapshot carried.
func (f *FSM) Diverged() *Divergence { return f.diverged.d.Load() }

// DivergedCh is closed once Diverged is not nil.
func (f *FSM) DivergedCh() <-chan struct{} { return f.diverged.done }

// MarkDiverged records that this FSM's image is not to be acted on, at
// index, for reason; it reports false (and changes nothing) when an
// earlier reason was recorded.
func (f *FSM) MarkDiverged(index uint64, reason string) bool { return f.diverged.mark(index, reason) }

// LatestDigest returns the digest of the newest entry applied, or false
// while this FSM has none (it restored a snapshot that carried no digest,
// and no entry has moved the controller epoch since).
func (f *FSM) LatestDigest() (Digest, bool) { return f.digests.latest() }

// DigestAt returns the digest as of the entry at index, or why this FSM has
// none: it has not applied index yet (ErrDigestNotApplied), index is older
// than the digests it keeps or no command entry, or its chain is unknown
// (LatestDigest).
func (f *FSM) DigestAt(index uint64) (Digest, error) { return f.digests.at(index) }
