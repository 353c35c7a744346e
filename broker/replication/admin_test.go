package replication

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
)

// TestReplicaManager_DeleteRecords: Kafka's deleteRecordsOnLeader and
// DelayedDeleteRecords (DeleteRecordsRequestTest, PartitionTest's
// testDeleteRecordsOnLeader...): the leader's log start moves at once, up
// to the high watermark only; the answer waits until every live replica's
// log start, as its fetches say, has reached it; followers take the
// leader's log start from its fetch answers; a new leader serves from it.
func TestReplicaManager_DeleteRecords(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 4)
	e.produce(1, 4)
	e.produce(1, 2) // offsets 0-9 in batches at 0, 4, 8
	e.catchUp(2)
	e.catchUp(3)
	e.fetch(2)
	e.fetch(3)
	if e.hw(1) != 10 {
		t.Fatalf("high watermark %d, want 10", e.hw(1))
	}
	m := e.ms[1]
	for _, tc := range []struct {
		name   string
		broker int32
		offset int64
		want   *kerr.Error
	}{
		{"past the high watermark", 1, 11, kerr.OffsetOutOfRange},
		{"negative, not -1", 1, -2, kerr.OffsetOutOfRange},
		{"on a follower", 2, 4, kerr.NotLeaderForPartition},
	} {
		if _, err := e.ms[tc.broker].DeleteRecords("t", 0, tc.offset); !isKerr(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := m.DeleteRecords("nope", 0, 1); !isKerr(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if got := e.replica(1).log.LogStartOffset(); got != 0 {
		t.Fatalf("refused deletions moved the log start to %d", got)
	}

	await, err := m.DeleteRecords("t", 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.replica(1).log.LogStartOffset(); got != 5 {
		t.Fatalf("leader's log start %d right after DeleteRecords, want 5", got)
	}
	if r, err := m.ListOffsets(context.Background(), "t", 0, -1, EarliestTimestamp); err != nil || r.Offset != 5 {
		t.Fatalf("earliest = %+v, %v; want 5", r, err)
	}
	if _, err := m.Fetch(context.Background(), "t", 0, -1, 4, 1<<20, 0); !isKerr(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch below the new log start: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	// The followers have not fetched since: a look says not yet.
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := await(expired); !isKerr(err, kerr.RequestTimedOut) {
		t.Fatalf("await before the followers fetched: %v, want REQUEST_TIMED_OUT", err)
	}
	done := make(chan error, 1)
	var low int64
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		low, err = await(ctx)
		done <- err
	}()
	e.fetch(2) // learns the leader's log start 5
	e.fetch(3)
	for _, id := range []int32{2, 3} {
		if got := e.replica(id).log.LogStartOffset(); got != 5 {
			t.Fatalf("follower %d's log start %d, want the leader's 5", id, got)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("answered (%v) before the followers said their log starts", err)
	case <-time.After(20 * time.Millisecond):
	}
	e.fetch(2) // tells the leader
	e.fetch(3)
	select {
	case err := <-done:
		if err != nil || low != 5 {
			t.Fatalf("DeleteRecords = %d, %v; want low watermark 5", low, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("DeleteRecords did not answer once every replica had deleted")
	}

	// -1 is the high watermark, and needs the followers again.
	await, err = m.DeleteRecords("t", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.fetch(2)
		e.fetch(3)
	}
	if low, err := await(expired); err != nil || low != 10 {
		t.Fatalf("DeleteRecords(-1) = %d, %v; want the high watermark 10", low, err)
	}
	for id := int32(1); id <= 3; id++ {
		if r := e.replica(id); r.log.LogStartOffset() != 10 || len(r.log.Segments()) != 1 {
			t.Fatalf("broker %d's log starts at %d with %d segments; want 10, one", id, r.log.LogStartOffset(), len(r.log.Segments()))
		}
	}

	// A follower that leads next serves from the log start it took, and
	// keeps it across a restart.
	e.produce(1, 2)
	e.catchUp(2)
	e.ctl.commit(changeRec(leaderID(2), []int32{2, 3}))
	e.publish()
	if r, err := e.ms[2].ListOffsets(context.Background(), "t", 0, -1, EarliestTimestamp); err != nil || r.Offset != 10 {
		t.Fatalf("earliest on the new leader = %+v, %v; want 10", r, err)
	}
	if err := e.ms[3].Close(); err != nil {
		t.Fatal(err)
	}
	e.start(3)
	e.publish()
	if got := e.replica(3).log.LogStartOffset(); got != 10 {
		t.Fatalf("after a restart broker 3's log starts at %d, want 10", got)
	}
}

// TestReplicaManager_DeleteRecordsLosesLeadership: a DeleteRecords waiting
// for the followers ends with NOT_LEADER_OR_FOLLOWER when the leadership
// moves, as Kafka's DelayedDeleteRecords does.
func TestReplicaManager_DeleteRecordsLosesLeadership(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	await := deletingTo2(e)
	done := make(chan error, 1)
	go func() {
		_, err := await(context.Background())
		done <- err
	}()
	e.ctl.commit(changeRec(leaderID(2), []int32{2}))
	e.publish()
	select {
	case err := <-done:
		if !isKerr(err, kerr.NotLeaderForPartition) {
			t.Fatalf("await after the leadership moved: %v, want NOT_LEADER_OR_FOLLOWER", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("await went on after the leadership moved")
	}
}

// TestReplicaManager_LogDirs: the data dir with each replica, leader and
// follower, its size and a lag of 0 when caught up.
func TestReplicaManager_LogDirs(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 3)
	e.catchUp(2)
	for id := int32(1); id <= 3; id++ {
		dirs := e.ms[id].LogDirs()
		if len(dirs) != 1 || dirs[0].Path != filepath.Join(e.dirs[id], logsDir) || len(dirs[0].Replicas) != 1 {
			t.Fatalf("broker %d: %+v", id, dirs)
		}
		if dirs[0].TotalBytes <= 0 || dirs[0].UsableBytes < 0 || dirs[0].UsableBytes > dirs[0].TotalBytes {
			t.Errorf("broker %d: volume %d bytes, %d usable", id, dirs[0].TotalBytes, dirs[0].UsableBytes)
		}
		r := dirs[0].Replicas[0]
		want := broker.LogDirReplica{Topic: "t", Partition: 0, Size: e.replica(id).log.Size()}
		if r != want {
			t.Errorf("broker %d: replica %+v, want %+v", id, r, want)
		}
		if (r.Size > 0) != (id != 3) {
			t.Errorf("broker %d: size %d; broker 3 alone has not fetched", id, r.Size)
		}
	}
}

// TestReplicaManager_Producers: the idempotent producers a replica
// remembers, on the leader and on a follower alike.
func TestReplicaManager_Producers(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	if _, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 3, 1000, 0), AcksLeader, time.Second); err != nil {
		t.Fatal(err)
	}
	e.produce(1, 1) // not idempotent
	e.catchUp(2)
	for id := int32(1); id <= 2; id++ {
		ps, err := e.ms[id].Producers("t", 0)
		if err != nil || len(ps) != 1 || ps[0].ProducerID != 1000 || ps[0].ProducerEpoch != 0 || ps[0].LastSequence != 2 || ps[0].LastTimestamp <= 0 {
			t.Fatalf("broker %d: Producers = %+v, %v; want producer 1000 at epoch 0, last sequence 2", id, ps, err)
		}
	}
	if _, err := e.ms[1].Producers("nope", 0); !isKerr(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, err := e.ms[1].Producers("t", 1); !isKerr(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("an unknown partition: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

// TestReplicaManager_DeleteRecordsWaitsForLiveReplicas: every replica on a
// live broker holds the answer back, in the ISR or not, until its fetch
// says its log start; one on a fenced broker does not, fenced before or
// while the answer waits (Kafka's lowWatermarkIfLeader counts alive
// brokers' replicas).
func TestReplicaManager_DeleteRecordsWaitsForLiveReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fence: when broker 3, which never fetches, is fenced: never,
		// "before" the DeleteRecords or "while" its answer waits.
		fence string
		want  *kerr.Error
	}{
		{"broker 3 live, not fetching", "", kerr.RequestTimedOut},
		{"broker 3 fenced", "before", nil},
		{"broker 3 fenced while the answer waits", "while", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, clusterImage(t, nil, 1, 2))
			fence := func() {
				e.ctl.commit(fenceRec(3, 4))
				e.publish()
			}
			if tc.fence == "before" {
				fence()
			}
			await := deletingTo2(e)
			e.fetch(2)
			e.fetch(2)
			ctx, cancel := context.WithCancel(context.Background())
			if tc.fence == "while" {
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			} else {
				cancel() // one look
			}
			defer cancel()
			type result struct {
				low int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				low, err := await(ctx)
				done <- result{low, err}
			}()
			if tc.fence == "while" {
				select {
				case r := <-done:
					t.Fatalf("answered (%d, %v) with broker 3 live and not fetching", r.low, r.err)
				case <-time.After(20 * time.Millisecond):
				}
				fence()
			}
			r := <-done
			low, err := r.low, r.err
			switch {
			case tc.want != nil && !isKerr(err, tc.want):
				t.Fatalf("await = %d, %v; want %v", low, err, tc.want)
			case tc.want == nil && (err != nil || low != 2):
				t.Fatalf("await = %d, %v; want low watermark 2", low, err)
			}
		})
	}
}

// deletingTo2 writes records 0-2 at broker 1, leading t-0, has follower 2
// fetch them (and the high watermark), and begins broker 1's
// DeleteRecords to 2.
func deletingTo2(e *env) func(context.Context) (int64, error) {
	e.t.Helper()
	e.produce(1, 3)
	e.catchUp(2)
	e.fetch(2)
	await, err := e.ms[1].DeleteRecords("t", 0, 2)
	if err != nil {
		e.t.Fatal(err)
	}
	return await
}
