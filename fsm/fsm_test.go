package fsm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

func clusterID(id string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: id}}}
}

func epoch(e int64, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: e, LeaderId: leader}}}
}

func noOp() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

func batch(recs ...*keelpb.Record) *keelpb.RecordBatch { return &keelpb.RecordBatch{Records: recs} }

func TestFSM_Apply(t *testing.T) {
	base := &Image{ClusterID: "c1", ControllerEpoch: 3, ControllerLeaderID: 2, Offset: 10, Term: 4}
	tests := []struct {
		name    string
		start   *Image
		batch   *keelpb.RecordBatch
		wantErr string
		check   func(t *testing.T, img *Image)
	}{
		{
			name:  "first controller writes cluster id and epoch 1",
			start: Empty(),
			batch: batch(clusterID("c1"), epoch(1, 3)),
			check: func(t *testing.T, img *Image) {
				if img.ClusterID != "c1" || img.ControllerEpoch != 1 || img.ControllerLeaderID != 3 {
					t.Fatalf("got %+v", img)
				}
			},
		},
		{
			name:  "epoch follows by one",
			start: base,
			batch: batch(epoch(4, 1)),
			check: func(t *testing.T, img *Image) {
				if img.ControllerEpoch != 4 || img.ControllerLeaderID != 1 {
					t.Fatalf("got %+v", img)
				}
			},
		},
		{name: "epoch skipping ahead is refused", start: base, batch: batch(epoch(5, 1)), wantErr: "epoch 5 does not follow the current epoch 3"},
		{name: "stale epoch is refused", start: base, batch: batch(epoch(3, 1)), wantErr: "does not follow"},
		{name: "epoch without leader is refused", start: base, batch: batch(epoch(4, 0)), wantErr: "leader_id 0 is not a node id"},
		{name: "cluster id cannot change", start: base, batch: batch(clusterID("c2")), wantErr: `cluster id is already "c1"`},
		{name: "empty cluster id is refused", start: Empty(), batch: batch(clusterID("")), wantErr: "cluster_id is empty"},
		{
			name:  "same cluster id again is a no-op",
			start: base,
			batch: batch(clusterID("c1")),
			check: func(t *testing.T, img *Image) {
				if img.ClusterID != "c1" {
					t.Fatalf("got %+v", img)
				}
			},
		},
		{name: "empty batch is refused", start: base, batch: batch(), wantErr: ErrEmptyBatch.Error()},
		{name: "record without a type is refused", start: base, batch: batch(&keelpb.Record{}), wantErr: "unknown record type"},
		{
			name:    "batch is all or nothing",
			start:   base,
			batch:   batch(epoch(4, 1), noOp(), epoch(9, 1)),
			wantErr: "record 2 (controller_epoch)",
		},
		{
			name:  "no-op moves only the offset",
			start: base,
			batch: batch(noOp()),
			check: func(t *testing.T, img *Image) {
				want := *base
				want.Offset, want.Term = 11, 5
				if !sameImage(t, img, &want) {
					t.Fatalf("got %+v, want %+v", img, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := imageBytes(t, tt.start)
			got, err := Apply(tt.start, 11, 5, tt.batch)
			if !bytes.Equal(imageBytes(t, tt.start), before) {
				t.Fatalf("Apply modified its input image: %+v", tt.start)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if got != tt.start {
					t.Fatalf("a failed batch must return the input image")
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got.Offset != 11 || got.Term != 5 {
				t.Fatalf("offset/term = %d/%d, want 11/5", got.Offset, got.Term)
			}
			tt.check(t, got)
		})
	}
}

func TestFSM_ApplyEntry(t *testing.T) {
	f := New()
	img, changed := f.Watch()
	data, err := EncodeBatch(clusterID("c1"), epoch(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if resp := f.ApplyEntry(1, 1, data); resp != nil {
		t.Fatalf("ApplyEntry = %v", resp)
	}
	select {
	case <-changed:
	default:
		t.Fatal("Watch channel not closed after a change")
	}
	if img.ControllerEpoch != 0 {
		t.Fatal("an image handed out earlier changed")
	}
	if f.Image().ControllerEpoch != 1 || f.Image().Offset != 1 {
		t.Fatalf("image = %+v", f.Image())
	}

	for name, entry := range map[string][]byte{
		"empty entry":    nil,
		"unknown format": {9, 1, 2},
		"garbage batch":  {EntryFormatV1, 0xff, 0xff, 0xff},
	} {
		if resp := f.ApplyEntry(2, 1, entry); resp == nil {
			t.Errorf("%s: ApplyEntry accepted it", name)
		}
	}
	if f.Image().Offset != 1 {
		t.Fatalf("a rejected entry changed the image: %+v", f.Image())
	}
}

// randomLog builds a log of batches, some valid and some not, from a seed.
func randomLog(seed uint64, n int) [][]byte {
	_, log := randomRecordLog(seed, n)
	return log
}

// randomRecordLog is randomLog with the records each entry was encoded
// from (a torn entry's too).
func randomRecordLog(seed uint64, n int) ([][]*keelpb.Record, [][]byte) {
	r := rand.New(rand.NewPCG(seed, seed))
	var epochNow int64
	var log [][]byte
	var batches [][]*keelpb.Record
	for i := 0; i < n; i++ {
		var recs []*keelpb.Record
		for j := 0; j < 1+r.IntN(4); j++ {
			id := int32(r.IntN(4))
			tid := TopicID{byte(1 + r.IntN(3))}
			switch r.IntN(13) {
			case 11:
				// Configs of the cluster or a topic, set (sometimes badly) or
				// deleted.
				res := ""
				if r.IntN(2) == 0 {
					res = fmt.Sprintf("t%d", tid[0])
				}
				name := []string{MinInsyncReplicas, UncleanLeaderElection, RetentionMs, "nope"}[r.IntN(4)]
				var value *string
				if r.IntN(3) > 0 {
					v := []string{"1", "2", "TRUE", "-1", "x"}[r.IntN(5)]
					value = &v
				}
				recs = append(recs, configRec(res, name, value))
			case 12:
				// Eligible leader replicas, a last known leader, a recovery
				// state: as often refused as not.
				elr := [][]int32{{}, {2}, {2, 3}, {1}}[r.IntN(4)]
				state := keelpb.LeaderRecoveryState(r.IntN(2))
				recs = append(recs, elrChange(tid, 0, nil, []int32{1}, elr, [][]int32{nil, {1}, {}}[r.IntN(3)], &state))
			case 8:
				recs = append(recs, topicRec(fmt.Sprintf("t%d", tid[0]), tid, nil),
					partRec(tid, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, int32(1+r.IntN(3))))
			case 9:
				isr := []int32{1, 2, 3}[:1+r.IntN(3)]
				recs = append(recs, change(tid, 0, leader(isr[r.IntN(len(isr))]), isr, nil))
			case 10:
				if r.IntN(4) == 0 {
					recs = append(recs, removeTopic(tid))
				} else {
					recs = append(recs, partRec(tid, int32(1+r.IntN(2)), []int32{2, 3}, []int32{3}, 3))
				}
			case 4:
				recs = append(recs, register(id, fmt.Sprintf("inc-%d", r.IntN(3))))
			case 5:
				recs = append(recs, fence(id, int64(r.IntN(i+2))))
			case 6:
				recs = append(recs, unfence(id, int64(r.IntN(i+2))))
			case 7:
				if r.IntN(3) == 0 {
					recs = append(recs, unregister(id, int64(r.IntN(i+2))))
				} else {
					recs = append(recs, featureLevel(uint32(r.IntN(2))))
				}
			case 0:
				recs = append(recs, clusterID(fmt.Sprintf("cluster-%d", r.IntN(2))))
			case 1:
				e := epochNow + 1
				if r.IntN(5) == 0 {
					e = epochNow + int64(r.IntN(3)) - 1 // often invalid
				}
				recs = append(recs, epoch(e, int32(1+r.IntN(5))))
				epochNow = e
			default:
				if r.IntN(3) == 0 {
					// A block of producer ids: refused unless the broker
					// epoch is current and the next id grows.
					recs = append(recs, producerIDs(id, int64(r.IntN(i+2)), int64(r.IntN(4)*ProducerIDBlockSize)))
				} else {
					recs = append(recs, noOp())
				}
			}
		}
		data, _ := EncodeBatch(recs...)
		if r.IntN(20) == 0 {
			data = data[:r.IntN(len(data))] // a torn entry
		}
		log = append(log, data)
		batches = append(batches, recs)
	}
	return batches, log
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	write, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFSM_Deterministic(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		log := randomLog(seed, 300)
		a, b := New(), New()
		for i, e := range log {
			ra, rb := a.ApplyEntry(uint64(i+1), 1, e), b.ApplyEntry(uint64(i+1), 1, e)
			if (ra == nil) != (rb == nil) {
				t.Fatalf("seed %d entry %d: results differ: %v vs %v", seed, i, ra, rb)
			}
		}
		if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
			t.Fatalf("seed %d: snapshots differ", seed)
		}
	}
}

// Replaying the whole log equals restoring a snapshot taken part way and
// replaying the rest.
func TestFSM_SnapshotPlusSuffixEqualsFullReplay(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		log := randomLog(seed, 200)
		cut := int(seed*7) % len(log)
		full, prefix := New(), New()
		for i, e := range log {
			full.ApplyEntry(uint64(i+1), 1, e)
			if i < cut {
				prefix.ApplyEntry(uint64(i+1), 1, e)
			}
		}
		restored := New()
		if err := restored.Restore(bytes.NewReader(snapshotBytes(t, prefix))); err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		for i := cut; i < len(log); i++ {
			restored.ApplyEntry(uint64(i+1), 1, log[i])
		}
		if !bytes.Equal(snapshotBytes(t, restored), snapshotBytes(t, full)) {
			t.Fatalf("seed %d: snapshots differ", seed)
		}
	}
}

func TestSnapshot_RoundTrip(t *testing.T) {
	for _, img := range []*Image{
		Empty(),
		{ClusterID: "abc", Offset: 3, Term: 1},
		{ClusterID: "abc", ControllerEpoch: 42, ControllerLeaderID: 3, Offset: 99, Term: 7},
	} {
		var buf bytes.Buffer
		if err := WriteSnapshot(&buf, img); err != nil {
			t.Fatal(err)
		}
		got, err := ReadSnapshot(&buf)
		if err != nil {
			t.Fatalf("ReadSnapshot(%+v): %v", img, err)
		}
		if !sameImage(t, got, img) {
			t.Fatalf("round trip: got %+v, want %+v", got, img)
		}
	}
}

func TestSnapshot_RefusesDamage(t *testing.T) {
	img := &Image{ClusterID: "abc", ControllerEpoch: 42, ControllerLeaderID: 3, Offset: 99, Term: 7}
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()

	withVersion := func(v uint32) []byte {
		var b bytes.Buffer
		fw := &frameWriter{w: bufioWriter(&b)}
		b.WriteString(snapshotMagic)
		_ = fw.frame(frameHeader, &keelpb.SnapshotHeader{FormatVersion: v})
		_ = fw.w.Flush()
		return b.Bytes()
	}
	tests := map[string][]byte{
		"empty":            nil,
		"bad magic":        append([]byte("NOTASNAP"), good[8:]...),
		"truncated":        good[:len(good)-5],
		"no trailer":       good[:len(good)-(len(good)-40)],
		"trailing garbage": append(append([]byte{}, good...), 0),
		"wrong version":    withVersion(7),
	}
	// Every single flipped byte must be caught.
	for i := range good {
		b := append([]byte{}, good...)
		b[i] ^= 0x5a
		tests[fmt.Sprintf("flipped byte %d", i)] = b
	}
	for name, data := range tests {
		_, err := ReadSnapshot(bytes.NewReader(data))
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: err = %v, want ErrCorruptSnapshot", name, err)
		}
	}

	// A failed restore leaves the FSM as it was.
	f := New()
	data, _ := EncodeBatch(clusterID("keep"), epoch(1, 1))
	f.ApplyEntry(1, 1, data)
	if err := f.Restore(bytes.NewReader(good[:20])); err == nil {
		t.Fatal("restore of a truncated snapshot succeeded")
	}
	if f.Image().ClusterID != "keep" {
		t.Fatalf("failed restore changed the image: %+v", f.Image())
	}
}

func bufioWriter(b *bytes.Buffer) *bufio.Writer { return bufio.NewWriter(b) }

// imageBytes is img's snapshot encoding: two images are equal when these are.
func imageBytes(t *testing.T, img *Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sameImage(t *testing.T, a, b *Image) bool {
	t.Helper()
	return bytes.Equal(imageBytes(t, a), imageBytes(t, b))
}
