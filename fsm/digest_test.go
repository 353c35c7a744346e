package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// digestLog is a small log: a new cluster at level 1, raised to 2 at entry
// 3, a takeover at entry 5.
func digestLog(t *testing.T) [][]byte {
	t.Helper()
	return [][]byte{
		encoded(t, []*keelpb.Record{clusterID("c1"), featureLevel(1), epoch(1, 1)}),
		encoded(t, []*keelpb.Record{noOp()}),
		encoded(t, []*keelpb.Record{featureLevel(2)}),
		encoded(t, []*keelpb.Record{noOp()}),
		encoded(t, []*keelpb.Record{epoch(2, 2)}),
		encoded(t, []*keelpb.Record{noOp()}),
	}
}

func applyAll(f *FSM, log [][]byte, from int) {
	for i := from; i < len(log); i++ {
		f.ApplyEntry(uint64(i+1), 1, log[i])
	}
}

func latest(t *testing.T, f *FSM) Digest {
	t.Helper()
	d, ok := f.LatestDigest()
	if !ok {
		t.Fatal("LatestDigest: unknown")
	}
	return d
}

// A node that refuses a committed entry records it, once, with the index
// and the FSM's own error; the images and the digests of two nodes that
// applied the same log the same way agree.
func TestFSM_RefusalIsADivergence(t *testing.T) {
	log := digestLog(t)
	a, old := New(), NewWithMaxMetadataVersion(1)
	applyAll(a, log, 0)
	applyAll(old, log, 0)
	if d := a.Diverged(); d != nil {
		t.Fatalf("a node that refused nothing is diverged: %+v", d)
	}
	d := old.Diverged()
	if d == nil {
		t.Fatal("a node that refused entry 3 is not diverged")
	}
	if d.Index != 3 || !strings.Contains(d.Reason, "refused committed entry 3 (term 1)") ||
		!strings.Contains(d.Reason, "metadata.version 2 is outside the range this binary supports, 1-1") {
		t.Errorf("divergence = %+v", d)
	}
	select {
	case <-old.DivergedCh():
	default:
		t.Error("DivergedCh not closed")
	}
	if old.Refused() != 1 {
		t.Errorf("refused %d entries, want 1", old.Refused())
	}
	// A later refusal keeps the first reason.
	old.ApplyEntry(7, 1, encoded(t, []*keelpb.Record{featureLevel(2)}))
	if got := old.Diverged(); got.Index != 3 {
		t.Errorf("after a second refusal: %+v", got)
	}
	if old.MarkDiverged(9, "again") {
		t.Error("MarkDiverged replaced the first reason")
	}
}

// The digest covers what each node applied, and how: equal logs applied
// alike agree at every index; a node that refused an entry the others
// accepted differs from that entry on, takeovers included.
func TestDigest_FollowsOutcomes(t *testing.T) {
	log := digestLog(t)
	a, b, old := New(), New(), NewWithMaxMetadataVersion(1)
	for i, e := range log {
		index := uint64(i + 1)
		for _, f := range []*FSM{a, b, old} {
			f.ApplyEntry(index, 1, e)
		}
		da, db, dold := latest(t, a), latest(t, b), latest(t, old)
		if da != db || da.Index != index {
			t.Fatalf("entry %d: equal nodes differ: %v, %v", index, da, db)
		}
		wantSame := index < 3
		if (da == dold) != wantSame {
			t.Errorf("entry %d: digests equal = %v, want %v (%v, %v)", index, da == dold, wantSame, da, dold)
		}
	}
	for index := uint64(1); index <= uint64(len(log)); index++ {
		d, err := a.DigestAt(index)
		if err != nil || d.Index != index {
			t.Errorf("DigestAt(%d) = %v, %v", index, d, err)
		}
	}
	if _, err := a.DigestAt(99); !errors.Is(err, ErrDigestNotApplied) {
		t.Errorf("DigestAt(99): %v", err)
	}
}

// The active controller adopts its own speculations instead of applying
// them again: its digest must be the one a follower computes by applying.
func TestDigest_AdoptedEqualsApplied(t *testing.T) {
	leader, follower := New(), New()
	prior := leader.Image()
	recs := []*keelpb.Record{clusterID("c1"), epoch(1, 1)}
	s, err := Speculate(prior, 1, 1, recs)
	if err != nil {
		t.Fatal(err)
	}
	leader.Offer(s)
	leader.ApplyEntry(1, 1, s.Data())
	follower.ApplyEntry(1, 1, encoded(t, recs))
	if leader.adopted.Load() != 1 {
		t.Fatal("the speculation was not adopted")
	}
	if latest(t, leader) != latest(t, follower) {
		t.Errorf("adopted %v, applied %v", latest(t, leader), latest(t, follower))
	}
}

// A raft snapshot carries the digest chain and any divergence, so that a
// node restarting from it (or installing it) goes on where the writer was;
// an image snapshot (WriteSnapshot: brokers, keel snapshot save) carries
// neither, and the chain is unknown after it until the next takeover.
func TestSnapshot_CarriesDigestAndDivergence(t *testing.T) {
	log := digestLog(t)
	for _, cut := range []int{2, 4, 5} {
		full, prefix := New(), New()
		applyAll(full, log, 0)
		applyAll(prefix, log[:cut], 0)

		restored := New()
		if err := restored.Restore(bytes.NewReader(snapshotBytes(t, prefix))); err != nil {
			t.Fatal(err)
		}
		if latest(t, restored) != latest(t, prefix) {
			t.Errorf("cut %d: restored digest %v, written %v", cut, latest(t, restored), latest(t, prefix))
		}
		applyAll(restored, log, cut)
		if latest(t, restored) != latest(t, full) {
			t.Errorf("cut %d: restored then replayed %v, full replay %v", cut, latest(t, restored), latest(t, full))
		}

		var plain bytes.Buffer
		if err := WriteSnapshot(&plain, prefix.Image()); err != nil {
			t.Fatal(err)
		}
		fresh := New()
		if err := fresh.Restore(bytes.NewReader(plain.Bytes())); err != nil {
			t.Fatal(err)
		}
		if _, ok := fresh.LatestDigest(); ok {
			t.Errorf("cut %d: a digest after a snapshot that carried none", cut)
		}
		if _, err := fresh.DigestAt(uint64(cut)); err == nil || !strings.Contains(err.Error(), "carried none") {
			t.Errorf("cut %d: DigestAt: %v", cut, err)
		}
		// Another node restored from the same snapshot: the two start a
		// chain at the same entry, the takeover at 5, and agree; it is not
		// the chain of a node that applied the whole log.
		other := New()
		if err := other.Restore(bytes.NewReader(plain.Bytes())); err != nil {
			t.Fatal(err)
		}
		applyAll(fresh, log, cut)
		applyAll(other, log, cut)
		d, ok := fresh.LatestDigest()
		switch {
		case cut >= 5 && ok:
			t.Errorf("cut %d: a digest with no takeover after the snapshot: %v", cut, d)
		case cut < 5 && (!ok || d.Start != 5 || d != latest(t, other)):
			t.Errorf("cut %d: after the rest of the log: %v known=%v; another node restored alike: %v", cut, d, ok, latest(t, other))
		}
	}

	old := NewWithMaxMetadataVersion(1)
	applyAll(old, log[:2], 0)
	old.MarkDiverged(2, "its digest differed")
	snap := snapshotBytes(t, old)
	restored := New()
	if err := restored.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if d := restored.Diverged(); d == nil || d.Index != 2 || d.Reason != "its digest differed" {
		t.Errorf("restored divergence = %+v", d)
	}
	info, err := VerifySnapshot(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if info.Diverged == nil || info.Digest == nil || info.Digest.Index != 2 {
		t.Errorf("VerifySnapshot: digest %v, divergence %v", info.Digest, info.Diverged)
	}
}

// An FSM limited to an older metadata.version refuses a snapshot above it
// and keeps its image.
func TestFSM_MaxMetadataVersionRefusesSnapshot(t *testing.T) {
	f := New()
	applyAll(f, digestLog(t), 0)
	old := NewWithMaxMetadataVersion(1)
	err := old.Restore(bytes.NewReader(snapshotBytes(t, f)))
	if !errors.Is(err, ErrUnsupportedMetadataVersion) || !strings.Contains(err.Error(), "the snapshot is at metadata.version 2; this binary supports 1-1") {
		t.Fatalf("Restore = %v", err)
	}
	if old.Image().Offset != 0 {
		t.Errorf("the refused snapshot was installed: %+v", old.Image())
	}
}

func TestDigest_RingBound(t *testing.T) {
	f := New()
	data := encoded(t, []*keelpb.Record{noOp()})
	f.ApplyEntry(1, 1, encoded(t, []*keelpb.Record{clusterID("c1"), epoch(1, 1)}))
	last := uint64(2*digestRing + 10)
	for i := uint64(2); i <= last; i += 2 { // odd indexes: raft configuration changes
		f.ApplyEntry(i, 1, data)
	}
	if _, err := f.DigestAt(2); err == nil || !strings.Contains(err.Error(), "older than the digests it keeps") {
		t.Errorf("DigestAt(2): %v", err)
	}
	if _, err := f.DigestAt(last - 1); err == nil || !strings.Contains(err.Error(), "no entry it applied") {
		t.Errorf("DigestAt(%d): %v", last-1, err)
	}
	if d, err := f.DigestAt(last); err != nil || d.Index != last {
		t.Errorf("DigestAt(%d) = %v, %v", last, d, err)
	}
}

// BenchmarkDigest_Fold: what the digest adds to each committed entry, by
// entry size: a no-op, a small decision, a topic of 10,000 partitions
// (about 370 KiB), beside BenchmarkApply_CreateTopic10k's cost of applying
// that topic.
func BenchmarkDigest_Fold(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 370 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			data := make([]byte, size)
			var d digests
			d.known = true
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				d.fold(uint64(i+1), 1, true, false, data)
			}
		})
	}
}
