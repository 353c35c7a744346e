package fsm

import (
	"io"
	"sync"
	"sync/atomic"
)

// FSM holds the current image and applies committed raft entries to it. It
// implements raftlog.StateMachine. Apply runs on one goroutine (raft's); any
// number of readers may call Image or Watch concurrently.
type FSM struct {
	img atomic.Pointer[Image]
	// refused counts committed entries this FSM refused. Every node refuses
	// the same ones (Apply is deterministic), so the images still agree;
	// but the active controller checks every batch before raft, so any
	// refusal is a bug worth an alert.
	refused atomic.Uint64
	// adopted counts committed entries applied by adopting an offered
	// speculation (speculate.go).
	adopted atomic.Uint64
	offers  offers

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed and replaced each time the image changes
}

// New returns an FSM holding the empty image.
func New() *FSM {
	f := &FSM{changed: make(chan struct{})}
	f.img.Store(Empty())
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
func (f *FSM) ApplyEntry(index, term uint64, data []byte) any {
	if s := f.offers.take(index); s != nil && s.matches(f.img.Load(), index, term, data) {
		f.adopted.Add(1)
		f.publish(s.next)
		return nil
	}
	batch, err := DecodeBatch(data)
	if err != nil {
		f.refused.Add(1)
		return err
	}
	next, err := Apply(f.img.Load(), index, term, batch)
	if err != nil {
		f.refused.Add(1)
		return err
	}
	f.publish(next)
	return nil
}

// Refused is the number of committed entries this FSM has refused since it
// was made (decoding errors included).
func (f *FSM) Refused() uint64 { return f.refused.Load() }

// Snapshot captures the current image in O(1); the returned function streams
// it out and may run while later entries are applied.
func (f *FSM) Snapshot() (func(w io.Writer) error, error) {
	img := f.img.Load()
	return func(w io.Writer) error { return WriteSnapshot(w, img) }, nil
}

// Restore replaces the image with one read from a snapshot stream. A snapshot
// that does not verify leaves the current image in place.
func (f *FSM) Restore(r io.Reader) error {
	img, err := ReadSnapshot(r)
	if err != nil {
		return err
	}
	f.Install(img)
	return nil
}

// Install replaces the image with img, one ReadSnapshot rebuilt: Restore in
// two steps, for a caller that must not hold its own lock while a large
// snapshot is read. Like Restore it runs on the goroutine that applies
// entries, so that none is applied between the read and the install.
func (f *FSM) Install(img *Image) {
	f.offers.clear()
	f.publish(img)
}
