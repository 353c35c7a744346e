package broker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Why a push was refused. Each ends the stream; the stream loop reconnects
// and resumes from the replayer's own offset (fromOffset).
var (
	// errStaleControllerEpoch: the push comes from a controller older than
	// one already heard from, a deposed controller that has not noticed yet.
	errStaleControllerEpoch = errors.New("push from a stale controller epoch")
	// errOffsetGap: an entry does not continue the applied offset, so a batch
	// in between was lost.
	errOffsetGap = errors.New("metadata entry does not continue the applied offset")
	// errDiverged: a committed batch failed to apply. Brokers and controllers
	// run the same deterministic Apply, so this means the image no longer
	// matches the controllers'; only a snapshot can repair it.
	errDiverged = errors.New("metadata batch failed to apply")
	// errBadSnapshot: a snapshot stream did not verify or was malformed.
	errBadSnapshot = errors.New("metadata snapshot refused")
	// errBadPush: a push with no body, or entries in the middle of a snapshot.
	errBadPush = errors.New("malformed metadata push")
)

// replayer turns the pushes of a metadata stream into images. It is used by
// one goroutine at a time (the stream loop); epoch and controllerID may be
// read from any goroutine.
type replayer struct {
	img *fsm.Image
	// epoch is the highest controller epoch seen, in a push or in the image.
	epoch atomic.Int64
	// controllerID is the controller whose push was last accepted.
	controllerID atomic.Int32
	// wantSnapshot asks for the next stream from offset 0, which always
	// starts with a snapshot: the way out of a divergence.
	wantSnapshot bool
	// snap is the snapshot being received, nil between snapshots.
	snap *snapshotReader

	// publish is called with every new image, in order. An error from it is
	// fatal (the image belongs to another cluster).
	publish func(before, after *fsm.Image) error
	log     *slog.Logger
}

func newReplayer(log *slog.Logger, publish func(before, after *fsm.Image) error) *replayer {
	r := &replayer{img: fsm.Empty(), publish: publish, log: log}
	r.controllerID.Store(-1)
	return r
}

// fromOffset is where the next stream should start.
func (r *replayer) fromOffset() uint64 {
	if r.wantSnapshot {
		return 0
	}
	return r.img.Offset
}

// fatalError is an error that must stop the agent, not just the stream.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// handle applies one push. A non-nil error means the stream must be dropped:
// errors wrapping the errXxx values above, or a *fatalError. The image only
// ever moves by whole verified batches or snapshots.
func (r *replayer) handle(push *keelpb.MetadataPush) error {
	if e := push.GetControllerEpoch(); e < r.epoch.Load() {
		return fmt.Errorf("%w: controller %d sent epoch %d, already seen %d",
			errStaleControllerEpoch, push.GetControllerId(), e, r.epoch.Load())
	}
	// The epoch is a fact about the controller, whatever the body holds.
	r.raiseEpoch(push.GetControllerEpoch())
	r.controllerID.Store(push.GetControllerId())
	var err error
	switch body := push.GetBody().(type) {
	case *keelpb.MetadataPush_Entries:
		if r.snap != nil {
			err = fmt.Errorf("%w: entries in the middle of a snapshot", errBadPush)
		} else {
			err = r.applyEntries(body.Entries.GetEntries())
		}
	case *keelpb.MetadataPush_Snapshot:
		err = r.snapshotChunk(body.Snapshot)
	default:
		err = fmt.Errorf("%w: no body", errBadPush)
	}
	if err != nil {
		r.reset() // the stream ends here, and a snapshot on it with it
	}
	return err
}

func (r *replayer) raiseEpoch(e int64) {
	if e > r.epoch.Load() {
		r.epoch.Store(e)
	}
}

func (r *replayer) applyEntries(entries []*keelpb.MetadataEntry) error {
	for _, e := range entries {
		if e.GetOffset() <= r.img.Offset {
			continue // already applied: a resend after a reconnect
		}
		if e.GetPrevOffset() != r.img.Offset {
			return fmt.Errorf("%w: entry %d follows %d, applied offset is %d",
				errOffsetGap, e.GetOffset(), e.GetPrevOffset(), r.img.Offset)
		}
		batch, err := fsm.DecodeBatch(e.GetData())
		if err == nil {
			var next *fsm.Image
			if next, err = fsm.Apply(r.img, e.GetOffset(), e.GetTerm(), batch); err == nil {
				if err := r.install(next); err != nil {
					return err
				}
				continue
			}
		}
		// Should never happen: the controllers applied this very entry.
		r.log.Error("METADATA DIVERGENCE: a committed batch does not apply to this broker's image; asking for a snapshot",
			"offset", e.GetOffset(), "term", e.GetTerm(), "applied_offset", r.img.Offset, "err", err)
		r.wantSnapshot = true
		return fmt.Errorf("%w: entry %d: %v", errDiverged, e.GetOffset(), err)
	}
	return nil
}

func (r *replayer) snapshotChunk(c *keelpb.SnapshotChunk) error {
	if r.snap == nil {
		r.snap = startSnapshot()
	}
	if err := r.snap.write(c.GetData()); err != nil {
		return r.snapshotFailed(err)
	}
	if !c.GetLast() {
		return nil
	}
	img, err := r.snap.finish()
	r.snap = nil
	if err != nil {
		return r.snapshotFailed(err)
	}
	if img.Offset < r.img.Offset {
		r.log.Warn("installing a metadata snapshot older than the applied offset",
			"snapshot_offset", img.Offset, "applied_offset", r.img.Offset)
	}
	if err := r.install(img); err != nil {
		return err
	}
	r.wantSnapshot = false
	r.log.Info("installed metadata snapshot", "offset", img.Offset, "controller_epoch", img.ControllerEpoch, "brokers", img.BrokerCount())
	return nil
}

func (r *replayer) snapshotFailed(err error) error {
	if r.snap != nil {
		r.snap.abort()
		r.snap = nil
	}
	return fmt.Errorf("%w: %v", errBadSnapshot, err)
}

// install hands next to publish and makes it the image.
func (r *replayer) install(next *fsm.Image) error {
	if err := r.publish(r.img, next); err != nil {
		return &fatalError{err}
	}
	r.img = next
	r.raiseEpoch(next.ControllerEpoch)
	return nil
}

// restart follows a quorum whose controller epoch went back to epoch: one
// started again from a snapshot (disaster recovery), whose history is not
// the one this image follows. The next stream starts with a snapshot, and
// pushes at epoch are taken. Only a registration's answer says so (it is a
// committed write, which no deposed controller can make); the stream loop
// must not be running.
func (r *replayer) restart(epoch int64) {
	r.epoch.Store(epoch)
	r.wantSnapshot = true
}

// reset forgets a snapshot in progress: the stream it came on has ended.
func (r *replayer) reset() {
	if r.snap != nil {
		r.snap.abort()
		r.snap = nil
	}
}

// snapshotReader verifies a snapshot while its chunks arrive: the chunks are
// written into a pipe that fsm.ReadSnapshot reads on its own goroutine, so the
// stream is never held in memory whole, and a corrupt stream is refused as
// soon as the reader sees it.
type snapshotReader struct {
	pw   *io.PipeWriter
	done chan struct{}
	img  *fsm.Image
	err  error
}

func startSnapshot() *snapshotReader {
	pr, pw := io.Pipe()
	s := &snapshotReader{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.img, s.err = fsm.ReadSnapshot(pr)
		// Unblock the writer whatever happened: ReadSnapshot reads until
		// EOF on success, but stops early on corruption.
		pr.CloseWithError(s.err)
	}()
	return s
}

// write feeds one chunk; an error means the reader has refused the stream.
func (s *snapshotReader) write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if _, err := s.pw.Write(p); err != nil {
		<-s.done
		return s.err
	}
	return nil
}

// finish ends the stream and returns the verified image.
func (s *snapshotReader) finish() (*fsm.Image, error) {
	s.pw.Close()
	<-s.done
	return s.img, s.err
}

// abort drops the snapshot and waits for its reader to stop.
func (s *snapshotReader) abort() {
	s.pw.CloseWithError(errors.New("snapshot aborted"))
	<-s.done
}
