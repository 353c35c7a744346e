package replication

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/rpc"
)

// Kafka's AbstractFetcherThreadTest cases: a follower's log against its
// leader's, after failovers that leave them diverging.

// logBytes is a replica's whole log as stored.
func (e *env) logBytes(id int32) []byte {
	e.t.Helper()
	l := e.replica(id).log
	var out []byte
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		res, err := l.Read(off, math.MaxInt32)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(res.Records) == 0 {
			break
		}
		out = append(out, res.Records...)
		bs := batchOffsets(res.Records)
		last := bs[len(bs)-1][0]
		off = nextAfter(e.t, l, last)
	}
	return out
}

// nextAfter is the offset after the batch at base.
func nextAfter(t *testing.T, l *partlog.Log, base int64) int64 {
	res, err := l.Read(base, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Records
	last := int64(int32(b[23])<<24 | int32(b[24])<<16 | int32(b[25])<<8 | int32(b[26]))
	return base + last + 1
}

// sameLogs requires the replicas' logs to hold the same batches, byte for
// byte, and their epoch caches the same epochs.
func (e *env) sameLogs(ids ...int32) {
	e.t.Helper()
	want := e.logBytes(ids[0])
	for _, id := range ids[1:] {
		if got := e.logBytes(id); !bytes.Equal(got, want) {
			e.t.Fatalf("broker %d log %v, broker %d log %v", id, batchOffsets(got), ids[0], batchOffsets(want))
		}
	}
}

// lead moves the leadership of t-0 to id with ISR isr (a failover the
// controllers decide) and tells every broker.
func (e *env) lead(id int32, isr ...int32) {
	e.t.Helper()
	e.ctl.commit(changeRec(leaderID(id), isr))
	e.publish()
}

// TestAbstractFetcherThread_TruncateToEpochEndOffsets (KIP-101 #1): the old
// leader kept a batch its follower never fetched; the follower led on and
// wrote its own. The old leader, now a follower, truncates to where its
// epoch ends in the new leader's log, then fetches the new epoch.
func TestAbstractFetcherThread_TruncateToEpochEndOffsets(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 2)
	e.catchUp(2)
	e.produce(1, 2) // [2, 4) at epoch 0: only broker 1 has it
	e.lead(2, 2)
	e.produce(2, 3) // [2, 5) at epoch 1
	if err := e.fetch(1); err != nil {
		t.Fatal(err)
	}
	if leo := e.leo(1); leo != 2 {
		t.Fatalf("broker 1 log end %d after the diverging epoch, want 2 (where epoch 0 ends on the leader)", leo)
	}
	e.catchUp(1)
	e.sameLogs(2, 1)
	if got := e.replica(1).log.EpochEntries(); len(got) != 2 || got[1].Epoch != 1 || got[1].StartOffset != 2 {
		t.Fatalf("broker 1 epochs %v, want epoch 1 from 2", got)
	}
}

// TestAbstractFetcherThread_TruncateToEpochEndOffsetsDivergence (KIP-279,
// KAFKA-6361): two quick failovers leave the follower with an epoch its
// leader never had. The leader answers the largest epoch it has below it;
// the follower cuts to the end of that epoch in both logs.
func TestAbstractFetcherThread_TruncateToEpochEndOffsetsDivergence(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 2)
	e.catchUp(2)
	e.catchUp(3)
	e.lead(2, 2)    // epoch 1
	e.produce(2, 2) // [2, 4) at epoch 1: only broker 2
	e.lead(3, 3)    // epoch 2
	e.produce(3, 3) // [2, 5) at epoch 2
	if err := e.fetch(2); err != nil {
		t.Fatal(err)
	}
	if leo := e.leo(2); leo != 2 {
		t.Fatalf("broker 2 log end %d, want 2: epoch 1 is not the leader's", leo)
	}
	e.catchUp(2)
	e.catchUp(1)
	e.sameLogs(3, 2, 1)
}

// TestAbstractFetcherThread_TruncationSkippedIfNoEpochChange (KAFKA-7164):
// a follower that missed whole epochs without records keeps what it has:
// the leader's log ends its last epoch where the follower's does.
func TestAbstractFetcherThread_TruncationSkippedIfNoEpochChange(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 2)
	e.catchUp(2)
	e.catchUp(3)
	e.lead(2, 2, 1)
	e.lead(1, 1, 2) // epoch 2; broker 3 fetched nothing in epoch 1 or 2
	e.produce(1, 1)
	before := e.leo(3)
	if err := e.fetch(3); err != nil {
		t.Fatal(err)
	}
	if leo := e.leo(3); leo != before+1 {
		t.Fatalf("broker 3 log end %d, want %d: nothing to truncate, one batch to append", leo, before+1)
	}
	e.sameLogs(1, 3)
}

// TestAbstractFetcherThread_FollowerNeverKeepsWhatTheLeaderLacks drives
// failovers in a fixed pseudo-random order and checks after each round
// that every follower, once caught up, holds exactly its leader's log:
// KIP-101's rule that no follower keeps a record the leader does not have.
func TestAbstractFetcherThread_FollowerNeverKeepsWhatTheLeaderLacks(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	leader := int32(1)
	seed := uint32(7)
	next := func(n uint32) uint32 { seed = seed*1103515245 + 12345; return (seed >> 16) % n }
	for round := range 12 {
		e.produce(leader, 1+int(next(3)))
		// Some followers fetch some of it.
		for _, id := range []int32{1, 2, 3} {
			if id != leader && next(2) == 0 {
				if err := e.fetch(id); err != nil {
					t.Fatalf("round %d: broker %d: %v", round, id, err)
				}
			}
		}
		if l := 1 + int32(next(3)); l != leader {
			leader = l
			e.lead(leader, leader)
		}
		e.produce(leader, 1)
		for _, id := range []int32{1, 2, 3} {
			if id != leader {
				e.catchUp(id)
			}
		}
		others := slices.DeleteFunc([]int32{1, 2, 3}, func(id int32) bool { return id == leader })
		e.sameLogs(append([]int32{leader}, others...)...)
	}
}

// TestAbstractFetcherThread_FollowerBelowLeaderLogStart (Kafka's
// handleOutOfRangeError): a follower behind the leader's log start starts
// its log there and fetches on.
func TestAbstractFetcherThread_FollowerBelowLeaderLogStart(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	e.produce(1, 2)
	e.produce(1, 2)
	if err := e.replica(1).log.DeleteTo(2); err != nil {
		t.Fatal(err)
	}
	if err := e.fetch(3); err != nil {
		t.Fatal(err)
	}
	if start := e.replica(3).log.LogStartOffset(); start != 2 {
		t.Fatalf("follower log start %d, want the leader's 2", start)
	}
	e.catchUp(3)
	if leo := e.leo(3); leo != 4 {
		t.Fatalf("follower log end %d, want 4", leo)
	}
}

func TestRetryBackoff(t *testing.T) {
	const backoff = time.Second
	behind := func(reason string) error { return reasonErr(codes.FailedPrecondition, reason, "the leader is behind") }
	for _, tc := range []struct {
		name     string
		err      error
		failures int
		want     time.Duration
	}{
		{"the leader does not lead yet: soon", behind(ReasonNotLeaderOrFollower), 1, 25 * time.Millisecond},
		{"the leader is at an older epoch: soon", behind(ReasonUnknownLeaderEpoch), 1, 25 * time.Millisecond},
		{"the leader holds no replica yet: soon", reasonErr(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "no replica"), 1, 25 * time.Millisecond},
		{"doubling", behind(ReasonNotLeaderOrFollower), 3, 100 * time.Millisecond},
		{"up to FetchBackoff", behind(ReasonNotLeaderOrFollower), 7, backoff},
		{"many failures stay at FetchBackoff", behind(ReasonUnknownLeaderEpoch), 1000, backoff},
		{"a fenced epoch: FetchBackoff", behind(rpc.ReasonFencedLeaderEpoch), 1, backoff},
		{"a storage error: FetchBackoff", reasonErr(codes.Internal, ReasonStorageError, "disk"), 1, backoff},
		{"the connection failed: FetchBackoff", errors.New("connection refused"), 1, backoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryBackoff(tc.err, tc.failures, backoff); got != tc.want {
				t.Fatalf("retryBackoff(%v, %d) = %v, want %v", tc.err, tc.failures, got, tc.want)
			}
		})
	}
}
