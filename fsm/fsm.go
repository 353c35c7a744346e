package fsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/keel-dev/keel/proto/keelpb"
)

// FSM holds the current image and applies committed raft entries to it,
// driven by the controller's applied log (controller.AppliedLog, the
// consensus.StateMachine). Apply runs on one goroutine (raft's); any
// number of readers may call Image or Watch concurrently.
type FSM struct {
	img atomic.Pointer[Image]
	// refused counts committed entries this FSM refused. The active
	// controller checks every batch before raft, so a leader never
	// proposes one its FSM refuses: a refusal means this node's image is
	// not the quorum's, and the first one is recorded in diverged.
	refused atomic.Uint64
	// adopted counts committed entries applied by adopting an offered
	// speculation (speculate.go).
	adopted atomic.Uint64
	offers  offers

	digests  digests    // the rolling digest of what was applied (digest.go)
	diverged divergence // why the image is not to be acted on, once it is not
	// maxLevel, when not 0, is the highest metadata.version this FSM
	// applies: test wiring that makes it refuse what an older binary's
	// would (NewWithMaxMetadataVersion).
	maxLevel uint32

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed and replaced each time the image changes
}

// New returns an FSM holding the empty image.
func New() *FSM {
	f := &FSM{changed: make(chan struct{})}
	f.diverged.done = make(chan struct{})
	// The empty image is where every node's log starts: the chain is
	// known, at zero.
	f.digests.known = true
	f.img.Store(Empty())
	return f
}

// NewWithMaxMetadataVersion returns an FSM that applies metadata.version
// levels up to max only, and refuses a FeatureLevel record or a snapshot
// above it as the state machine of a binary whose latest level is max
// does: test wiring for an older binary (keel controller
// --test-max-metadata-version). 0 or MaxMetadataVersion is New.
func NewWithMaxMetadataVersion(max uint32) *FSM {
	f := New()
	if max < MaxMetadataVersion {
		f.maxLevel = max
	}
	return f
}

// Image returns the current image. It is immutable: hold it as long as needed.
func (f *FSM) Image() *Image { return f.img.Load() }

// Watch returns the current image and a channel that is closed as soon as a
// newer image replaces it.
func (f *FSM) Watch() (*Image, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.img.Load(), f.changed
}

func (f *FSM) publish(img *Image) {
	f.mu.Lock()
	f.img.Store(img)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// ApplyEntry decodes and applies one committed raft entry. It returns nil on
// success and an error value (never a panic) for an entry that does not decode
// or a batch that fails validation; then the image is unchanged.
//
// An entry this node offered (Offer) and applied ahead of commit, at the
// same index and term, with the same bytes, to the image the FSM holds now,
// is not applied again: its result is adopted.
//
// A refused entry changes no image, but it is folded into the digest, and
// the first one is recorded (Diverged): the leader's FSM accepted it, so
// this node's image is no longer the quorum's.
func (f *FSM) ApplyEntry(index, term uint64, data []byte) any {
	prior := f.img.Load()
	if s := f.offers.take(index); s != nil && f.maxLevel == 0 && s.matches(prior, index, term, data) {
		f.adopted.Add(1)
		f.digests.fold(index, term, true, s.next.ControllerEpoch != prior.ControllerEpoch, data)
		f.publish(s.next)
		return nil
	}
	batch, err := DecodeBatch(data)
	if err == nil {
		err = f.supported(batch)
	}
	var next *Image
	if err == nil {
		next, err = Apply(prior, index, term, batch)
	}
	if err != nil {
		f.refused.Add(1)
		f.digests.fold(index, term, false, false, data)
		f.MarkDiverged(index, fmt.Sprintf("its state machine refused committed entry %d (term %d), which the leader's accepted: %v", index, term, err))
		return err
	}
	f.digests.fold(index, term, true, next.ControllerEpoch != prior.ControllerEpoch, data)
	f.publish(next)
	return nil
}

// supported refuses, with what an older binary's Apply would say, a
// FeatureLevel record above f.maxLevel (NewWithMaxMetadataVersion).
func (f *FSM) supported(batch *keelpb.RecordBatch) error {
	if f.maxLevel == 0 {
		return nil
	}
	for i, rec := range batch.GetRecords() {
		if level := rec.GetFeatureLevel().GetLevel(); level > f.maxLevel {
			return &RecordError{Position: i, Type: RecordType(rec), Err: fmt.Errorf("%w: %s %d is outside the range this binary supports, %d-%d",
				ErrUnsupportedMetadataVersion, MetadataVersionFeature, level, MinMetadataVersion, f.maxLevel)}
		}
	}
	return nil
}

// Refused is the number of committed entries this FSM has refused since it
// was made (decoding errors included).
func (f *FSM) Refused() uint64 { return f.refused.Load() }

// Snapshot captures the current image in O(1), with the digest chain and
// any divergence as of it; the returned function streams them out and may
// run while later entries are applied. It runs on the goroutine that
// applies entries, so the three belong together.
func (f *FSM) Snapshot() (func(w io.Writer) error, error) {
	img := f.img.Load()
	extra := &keelpb.SnapshotHeader{}
	if d, ok := f.digests.latest(); ok {
		extra.DigestStart, extra.DigestIndex, extra.Digest = d.Start, d.Index, d.Sum[:]
	}
	if d := f.Diverged(); d != nil {
		extra.DivergedIndex, extra.DivergedReason = d.Index, d.Reason
	}
	return func(w io.Writer) error { return writeSnapshot(w, img, extra) }, nil
}

// Restore replaces the image with one read from a snapshot stream. A snapshot
// that does not verify leaves the current image in place.
func (f *FSM) Restore(r io.Reader) error {
	img, info, err := ReadSnapshotInfo(r)
	if err != nil {
		return err
	}
	return f.InstallSnapshot(img, info)
}

// Install replaces the image with img, one ReadSnapshot rebuilt: Restore in
// two steps, for a caller that must not hold its own lock while a large
// snapshot is read. Like Restore it runs on the goroutine that applies
// entries, so that none is applied between the read and the install. The
// digest chain is unknown after it (InstallSnapshot carries one over).
func (f *FSM) Install(img *Image) {
	f.offers.clear()
	f.digests.reset(nil)
	f.publish(img)
}

// InstallSnapshot is Install of the image ReadSnapshotInfo read, with what
// its header carried: the digest chain goes on from the snapshot's, and a
// divergence it records is this FSM's too. An FSM limited to an older
// metadata.version refuses a snapshot above it, as that binary's reader
// would, and installs nothing.
func (f *FSM) InstallSnapshot(img *Image, info *SnapshotInfo) error {
	if f.maxLevel > 0 && info.MetadataVersion > f.maxLevel {
		return fmt.Errorf("%w: the snapshot is at %s %d; this binary supports %d-%d",
			ErrUnsupportedMetadataVersion, MetadataVersionFeature, info.MetadataVersion, MinMetadataVersion, f.maxLevel)
	}
	f.offers.clear()
	f.digests.reset(info.Digest)
	if d := info.Diverged; d != nil {
		f.MarkDiverged(d.Index, d.Reason)
	}
	f.publish(img)
	return nil
}
