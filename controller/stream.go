package controller

import (
	"context"
	"fmt"
	"io"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

const (
	// maxPushBytes bounds the entries of one push message.
	maxPushBytes = 1 << 20
	// snapshotChunkBytes is the size of one snapshot chunk on the stream.
	snapshotChunkBytes = 1 << 20
)

// StreamMetadata pushes committed batches to one broker, in offset order,
// until ctx ends or this node stops being the active controller. It is the
// broker's one sender: a slow broker only slows its own stream. A broker
// that is new (offset 0), behind the retained history, or at an offset this
// log never applied gets an image snapshot first, then the tail.
//
// The pushes of entries are encoded once for every stream at the same
// position (pushCache) and sent with stream.SendMsg; snapshot chunks, a
// broker's own, with stream.Send.
func (c *Controller) StreamMetadata(ctx context.Context, req *keelpb.StreamMetadataRequest, stream PushStream) error {
	l := c.active.Load()
	if l == nil {
		return c.notLeader()
	}
	img := c.fsm.Image()
	if req.ClusterId != "" && req.ClusterId != img.ClusterID {
		return fmt.Errorf("%w: broker %d belongs to cluster %s, this is cluster %s",
			ErrInconsistentClusterID, req.BrokerId, req.ClusterId, img.ClusterID)
	}
	if _, err := currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
		return err
	}
	stamp := func(p *keelpb.MetadataPush) *keelpb.MetadataPush {
		p.ControllerEpoch, p.ControllerId = l.epoch.Load(), c.cfg.NodeID
		return p
	}
	offset := req.FromOffset
	needSnapshot := offset == 0
	pos := c.metrics.streams.open(req.BrokerId, offset)
	defer c.metrics.streams.close(req.BrokerId, pos)
	// Crash detection (crash.go): an end this controller did not cause
	// may be the broker's death.
	l.sessions.streamOpened(req.BrokerId, req.BrokerEpoch)
	defer func() {
		if l.ctx.Err() == nil {
			l.sessions.streamEnded(req.BrokerId, req.BrokerEpoch, c.cfg.Now(), connClosedFrom(ctx))
		}
	}()
	// The first push goes at once, with no entries if there are none to
	// send: it tells the broker that this controller took its stream (a
	// broker whose stream broke knows from it that it is back, and stops
	// redialling fast), and it carries this controller's epoch. Older
	// brokers apply an empty batch as nothing.
	pushed := false
	for {
		if needSnapshot {
			img := c.applied.Current()
			if err := sendSnapshot(img, func(chunk *keelpb.SnapshotChunk) error {
				return stream.Send(stamp(&keelpb.MetadataPush{Body: &keelpb.MetadataPush_Snapshot{Snapshot: chunk}}))
			}); err != nil {
				return err
			}
			offset, needSnapshot, pushed = img.Offset, false, true
			pos.offset.Store(offset)
		}
		entries, ok, more := c.applied.Since(offset, maxPushBytes)
		if !ok {
			needSnapshot = true
			continue
		}
		if len(entries) > 0 || !pushed {
			pushed = true
			if err := c.sendEntries(l, offset, entries, stream); err != nil {
				return err
			}
			if len(entries) > 0 {
				offset = entries[len(entries)-1].Offset
				pos.offset.Store(offset)
				continue
			}
		}
		select {
		case <-more:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.ctx.Done():
			return c.notLeader()
		}
	}
}

// sendEntries sends the push of entries after offset (none: the first push
// of a stream with nothing new), sharing its encoding with every stream at
// the same position.
func (c *Controller) sendEntries(l *leadership, offset uint64, entries []Entry, stream PushStream) error {
	key := pushKey{epoch: l.epoch.Load(), prev: offset, last: offset}
	if len(entries) > 0 {
		key.last = entries[len(entries)-1].Offset
	}
	p, err := l.pushes.acquire(key, func() *keelpb.MetadataPush {
		msg := &keelpb.MetadataEntries{Entries: make([]*keelpb.MetadataEntry, len(entries))}
		for i, e := range entries {
			msg.Entries[i] = &keelpb.MetadataEntry{PrevOffset: e.Prev, Offset: e.Offset, Term: e.Term, Data: e.Data}
		}
		return &keelpb.MetadataPush{ControllerEpoch: key.epoch, ControllerId: c.cfg.NodeID,
			Body: &keelpb.MetadataPush_Entries{Entries: msg}}
	})
	if err != nil {
		return err
	}
	defer l.pushes.release(p)
	// Counted before the send: a reader of the stream that has the push
	// finds it counted.
	l.pushes.metrics.pushesSent.Inc()
	return stream.SendMsg(p.enc)
}

// sendSnapshot writes img in the FSM snapshot format as a series of chunks,
// the last one marked. The image is immutable, so no lock is held.
func sendSnapshot(img *fsm.Image, send func(*keelpb.SnapshotChunk) error) error {
	w := &chunkWriter{send: send}
	if err := fsm.WriteSnapshot(w, img); err != nil {
		return err
	}
	return w.flush()
}

// chunkWriter cuts a byte stream into SnapshotChunk messages of
// snapshotChunkBytes: the one cutter for both snapshot streams, a broker's
// on StreamMetadata and an operator's FetchSnapshot (SendSnapshot).
type chunkWriter struct {
	buf  []byte
	send func(*keelpb.SnapshotChunk) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, snapshotChunkBytes)
		}
		k := min(len(p), snapshotChunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == snapshotChunkBytes {
			if err := w.send(&keelpb.SnapshotChunk{Data: w.buf}); err != nil {
				return 0, err
			}
			// The sent slice belongs to the message now: start a new one.
			w.buf = nil
		}
	}
	return n, nil
}

// flush sends what is left, marked last (empty when the stream ended on a
// chunk boundary, so the reader still sees the end).
func (w *chunkWriter) flush() error {
	return w.send(&keelpb.SnapshotChunk{Data: w.buf, Last: true})
}

// SendSnapshot streams what WriteSnapshot writes as SnapshotChunk messages
// of 1 MiB, the last one marked, through send. It fails as WriteSnapshot
// does, or with send's error.
func (c *Controller) SendSnapshot(ctx context.Context, send func(*keelpb.SnapshotChunk) error) error {
	w := &chunkWriter{send: send}
	if err := c.WriteSnapshot(ctx, w); err != nil {
		return err
	}
	return w.flush()
}

// WriteSnapshot writes a consistent snapshot of the committed image to w, in
// the FSM snapshot format. Only the active controller answers (others return
// a NotLeaderError with the leader hint), so the snapshot is the quorum's
// latest committed state as this leader applied it. The image is immutable:
// no lock is held while it streams.
func (c *Controller) WriteSnapshot(ctx context.Context, w io.Writer) error {
	if c.active.Load() == nil {
		return c.notLeader()
	}
	return fsm.WriteSnapshot(ctxWriter{ctx: ctx, w: w}, c.applied.Current())
}

// ctxWriter stops a long snapshot stream once its caller has gone away.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (w ctxWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}
