package broker

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// testLog is a controller's log: entries[i] is the i-th batch, and images[k]
// the controller's image after the first k batches. Raft indexes that carry
// no batch (configuration entries, raft's own no-ops) leave gaps between
// offsets, so prev_offset is not always offset-1.
type testLog struct {
	entries []*keelpb.MetadataEntry
	images  []*fsm.Image
}

// newTestLog commits, at offsets 1, 3, 4, 6, 7: the cluster's first records,
// broker 1 and broker 2 registering, broker 1 unfenced, and a no-op.
func newTestLog(t *testing.T) *testLog {
	t.Helper()
	offsets := []uint64{1, 3, 4, 6, 7}
	l := &testLog{images: []*fsm.Image{fsm.Empty()}}
	for i, records := range [][]*keelpb.Record{
		{clusterIDRec("c"), featureLevelRec(1), epochRec(1, 1)},
		{registerRec(1, "a")},
		{registerRec(2, "b")},
		{unfenceRec(1, int64(offsets[1]))},
		{noOpRec()},
	} {
		l.commit(t, offsets[i], 1, records...)
	}
	return l
}

func (l *testLog) commit(t *testing.T, offset, term uint64, records ...*keelpb.Record) {
	t.Helper()
	data, err := fsm.EncodeBatch(records...)
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := fsm.DecodeBatch(data)
	last := l.images[len(l.images)-1]
	next, err := fsm.Apply(last, offset, term, batch)
	if err != nil {
		t.Fatalf("commit at %d: %v", offset, err)
	}
	l.entries = append(l.entries, &keelpb.MetadataEntry{PrevOffset: last.Offset, Offset: offset, Term: term, Data: data})
	l.images = append(l.images, next)
}

func entriesPush(epoch int64, entries ...*keelpb.MetadataEntry) *keelpb.MetadataPush {
	return &keelpb.MetadataPush{ControllerEpoch: epoch, ControllerId: 1,
		Body: &keelpb.MetadataPush_Entries{Entries: &keelpb.MetadataEntries{Entries: entries}}}
}

func chunkPushes(epoch int64, chunks []*keelpb.SnapshotChunk) []*keelpb.MetadataPush {
	out := make([]*keelpb.MetadataPush, len(chunks))
	for i, c := range chunks {
		out[i] = &keelpb.MetadataPush{ControllerEpoch: epoch, ControllerId: 1, Body: &keelpb.MetadataPush_Snapshot{Snapshot: c}}
	}
	return out
}

func snapshotBytes(t *testing.T, img *fsm.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := fsm.WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// recorder is a replayer's publish hook that remembers what it was given.
type recorder struct {
	offsets []uint64
	refuse  string // a cluster id to refuse, as an agent of another cluster does
}

func (rec *recorder) publish(before, after *fsm.Image) error {
	if rec.refuse != "" && after.ClusterID == rec.refuse {
		return clusterMismatchf("cluster %s", after.ClusterID)
	}
	rec.offsets = append(rec.offsets, after.Offset)
	return nil
}

func TestReplayer_Handle(t *testing.T) {
	l := newTestLog(t)
	e := l.entries
	snap4 := snapshotBytes(t, l.images[4])
	corrupt := bytes.Clone(snap4)
	corrupt[len(corrupt)/2] ^= 0xff

	cat := func(groups ...[]*keelpb.MetadataPush) []*keelpb.MetadataPush {
		var out []*keelpb.MetadataPush
		for _, g := range groups {
			out = append(out, g...)
		}
		return out
	}
	one := func(p *keelpb.MetadataPush) []*keelpb.MetadataPush { return []*keelpb.MetadataPush{p} }

	tests := []struct {
		name string
		// The replayer starts at the controller's image after start batches,
		// having seen controller epoch seen.
		start int
		seen  int64
		setup func(r *replayer)
		// The pushes are handled until one is refused, with wantErr.
		pushes  []*keelpb.MetadataPush
		wantErr error
		// The replayer must end at the controller's image after wantImage
		// batches, having published exactly wantPublished, and ask next for
		// wantFrom.
		wantImage     int
		wantPublished []uint64
		wantFrom      uint64
		wantEpoch     int64
	}{
		{
			name: "entries in order are applied", start: 1, seen: 1,
			pushes:    one(entriesPush(1, e[1], e[2], e[3], e[4])),
			wantImage: 5, wantPublished: []uint64{3, 4, 6, 7}, wantFrom: 7, wantEpoch: 1,
		},
		{
			name: "entries over several pushes", start: 0,
			pushes:    []*keelpb.MetadataPush{entriesPush(1, e[0]), entriesPush(1, e[1], e[2])},
			wantImage: 3, wantPublished: []uint64{1, 3, 4}, wantFrom: 4, wantEpoch: 1,
		},
		{
			name: "old and duplicate entries are skipped", start: 3, seen: 1,
			pushes:    one(entriesPush(1, e[0], e[1], e[2], e[3], e[2], e[3], e[4])),
			wantImage: 5, wantPublished: []uint64{6, 7}, wantFrom: 7, wantEpoch: 1,
		},
		{
			name: "a push from a lower controller epoch is refused", start: 2, seen: 5,
			pushes:  one(entriesPush(4, e[2])),
			wantErr: errStaleControllerEpoch, wantImage: 2, wantFrom: 3, wantEpoch: 5,
		},
		{
			name: "a push from a higher controller epoch is accepted and remembered", start: 2, seen: 1,
			pushes:    one(entriesPush(3, e[2])),
			wantImage: 3, wantPublished: []uint64{4}, wantFrom: 4, wantEpoch: 3,
		},
		{
			name: "a gap is refused", start: 2, seen: 1,
			pushes:  one(entriesPush(1, e[3])),
			wantErr: errOffsetGap, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "a gap after good entries keeps the good ones", start: 2, seen: 1,
			pushes:  one(entriesPush(1, e[2], e[4])),
			wantErr: errOffsetGap, wantImage: 3, wantPublished: []uint64{4}, wantFrom: 4, wantEpoch: 1,
		},
		{
			name: "a batch that does not apply asks for a snapshot", start: 2, seen: 1,
			pushes: one(entriesPush(1, &keelpb.MetadataEntry{PrevOffset: 3, Offset: 4, Term: 1,
				Data: mustEncode(t, unfenceRec(9, 3))})),
			wantErr: errDiverged, wantImage: 2, wantFrom: 0, wantEpoch: 1,
		},
		{
			name: "an entry that does not decode asks for a snapshot", start: 2, seen: 1,
			pushes:  one(entriesPush(1, &keelpb.MetadataEntry{PrevOffset: 3, Offset: 4, Term: 1, Data: []byte{99}})),
			wantErr: errDiverged, wantImage: 2, wantFrom: 0, wantEpoch: 1,
		},
		{
			name: "a snapshot replaces the image", start: 1, seen: 1,
			pushes:    chunkPushes(1, cut(snap4, 10)),
			wantImage: 4, wantPublished: []uint64{6}, wantFrom: 6, wantEpoch: 1,
		},
		{
			name: "a snapshot in one chunk", start: 0,
			pushes:    chunkPushes(1, cut(snap4, len(snap4))),
			wantImage: 4, wantPublished: []uint64{6}, wantFrom: 6, wantEpoch: 1,
		},
		{
			name: "a snapshot without its last chunk changes nothing yet", start: 1, seen: 1,
			pushes:    chunkPushes(1, cut(snap4, 10))[:3],
			wantImage: 1, wantFrom: 1, wantEpoch: 1,
		},
		{
			name: "a snapshot then the tail", start: 0,
			pushes:    cat(chunkPushes(1, cut(snapshotBytes(t, l.images[2]), 7)), one(entriesPush(1, e[1], e[2], e[3], e[4]))),
			wantImage: 5, wantPublished: []uint64{3, 4, 6, 7}, wantFrom: 7, wantEpoch: 1,
		},
		{
			name: "a snapshot ends the request for one", start: 2, seen: 1,
			setup:     func(r *replayer) { r.wantSnapshot = true },
			pushes:    chunkPushes(1, cut(snap4, 16)),
			wantImage: 4, wantPublished: []uint64{6}, wantFrom: 6, wantEpoch: 1,
		},
		{
			name: "a corrupt snapshot is refused and the image kept", start: 2, seen: 1,
			pushes:  chunkPushes(1, cut(corrupt, 10)),
			wantErr: errBadSnapshot, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "a truncated snapshot is refused and the image kept", start: 2, seen: 1,
			pushes:  chunkPushes(1, cut(snap4[:len(snap4)-5], 10)),
			wantErr: errBadSnapshot, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "data after a snapshot's end is refused", start: 2, seen: 1,
			pushes:  chunkPushes(1, cut(append(bytes.Clone(snap4), 0), 10)),
			wantErr: errBadSnapshot, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "entries in the middle of a snapshot are refused", start: 2, seen: 1,
			pushes:  cat(chunkPushes(1, cut(snap4, 10))[:2], one(entriesPush(1, e[2]))),
			wantErr: errBadPush, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "a push without a body is refused", start: 2, seen: 1,
			pushes:  one(&keelpb.MetadataPush{ControllerEpoch: 1}),
			wantErr: errBadPush, wantImage: 2, wantFrom: 3, wantEpoch: 1,
		},
		{
			name: "the image's controller epoch counts as seen", start: 5,
			pushes:  one(entriesPush(0, e[4])),
			wantErr: errStaleControllerEpoch, wantImage: 5, wantFrom: 7, wantEpoch: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			r := newReplayer(testLogger(t), rec.publish)
			t.Cleanup(r.reset)
			r.img = l.images[tt.start]
			r.raiseEpoch(max(tt.seen, r.img.ControllerEpoch))
			if tt.setup != nil {
				tt.setup(r)
			}
			var err error
			for _, p := range tt.pushes {
				if err = r.handle(p); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !bytes.Equal(snapshotBytes(t, r.img), snapshotBytes(t, l.images[tt.wantImage])) {
				t.Fatalf("image at offset %d, want the controller's image after %d batches (offset %d)",
					r.img.Offset, tt.wantImage, l.images[tt.wantImage].Offset)
			}
			if !slices.Equal(rec.offsets, tt.wantPublished) {
				t.Fatalf("published offsets %v, want %v", rec.offsets, tt.wantPublished)
			}
			if got := r.fromOffset(); got != tt.wantFrom {
				t.Fatalf("fromOffset = %d, want %d", got, tt.wantFrom)
			}
			if got := r.epoch.Load(); got != tt.wantEpoch {
				t.Fatalf("highest epoch = %d, want %d", got, tt.wantEpoch)
			}
			if tt.wantErr != nil && r.snap != nil {
				t.Fatal("a refused snapshot is still being received")
			}
		})
	}
}

func TestReplayer_SnapshotOfAnotherClusterIsFatal(t *testing.T) {
	l := newTestLog(t)
	rec := &recorder{refuse: "c"}
	r := newReplayer(testLogger(t), rec.publish)
	var err error
	for _, p := range chunkPushes(1, cut(snapshotBytes(t, l.images[3]), 8)) {
		if err = r.handle(p); err != nil {
			break
		}
	}
	var fatal *fatalError
	if !errors.As(err, &fatal) || !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("err = %v, want a fatal ErrClusterMismatch", err)
	}
	if r.img.Offset != 0 || len(rec.offsets) != 0 {
		t.Fatalf("image moved to %d; published %v", r.img.Offset, rec.offsets)
	}
}

func mustEncode(t *testing.T, records ...*keelpb.Record) []byte {
	t.Helper()
	data, err := fsm.EncodeBatch(records...)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
