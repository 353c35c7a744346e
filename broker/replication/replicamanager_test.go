package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
)

// Kafka's ReplicaManagerTest cases: produce with acks, consumer fetches and
// list offsets on broker 1 leading t-0.

func isKerr(err error, want *kerr.Error) bool {
	var got *kerr.Error
	return errors.As(err, &got) && got == want
}

// TestReplicaManager_ProduceWithAcksAll: acks=-1 answers once the high
// watermark passes the batch, that is once every ISR member has it.
func TestReplicaManager_ProduceWithAcksAll(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 1)
	done := make(chan error, 1)
	var res broker.ProduceResult
	go func() {
		var err error
		res, err = e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 3, 0, 0), AcksAll, 10*time.Second)
		done <- err
	}()
	poll.Until(t, 5*time.Second, "the batch appended", func() bool { return e.leo(1) == 4 })
	e.catchUp(2)
	select {
	case err := <-done:
		t.Fatalf("acks=all answered (%v) with follower 3 behind", err)
	case <-time.After(20 * time.Millisecond):
	}
	e.catchUp(3)
	e.fetch(2)
	e.fetch(3)
	select {
	case err := <-done:
		if err != nil || res.BaseOffset != 1 || res.LogAppendTime != -1 {
			t.Fatalf("produce = %+v, %v; want base offset 1", res, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("acks=all did not answer once the ISR had the batch")
	}
}

// TestReplicaManager_NotEnoughReplicas: with the ISR below
// min.insync.replicas, acks=-1 is refused before the append; acks=1 is
// not. NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the
// minimum by the time the batch committed.
func TestReplicaManager_NotEnoughReplicas(t *testing.T) {
	e := newEnv(t, clusterImage(t, map[string]string{fsm.MinInsyncReplicas: "2"}, 1))
	_, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 1, 0, 0), AcksAll, time.Second)
	if !isKerr(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with ISR [1], min ISR 2: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if leo := e.leo(1); leo != 0 {
		t.Fatalf("log end %d: the refused batch was appended", leo)
	}
	if _, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 1, 0, 0), AcksLeader, time.Second); err != nil {
		t.Fatalf("acks=1: %v", err)
	}

	t.Run("after append", func(t *testing.T) {
		e := newEnv(t, clusterImage(t, map[string]string{fsm.MinInsyncReplicas: "2"}, 1, 2))
		res := e.produce(1, 2)
		e.catchUp(2)
		e.fetch(2)
		if hw := e.hw(1); hw != 2 {
			t.Fatalf("high watermark %d, want 2", hw)
		}
		e.ctl.commit(changeRec(nil, []int32{1}))
		e.publish()
		r := e.replica(1)
		r.mu.Lock()
		gen := r.gen
		r.mu.Unlock()
		err := e.ms[1].awaitCommit(context.Background(), r, gen, res.BaseOffset+1, time.Second, "t", 0)
		if !isKerr(err, kerr.NotEnoughReplicasAfterAppend) {
			t.Fatalf("%v, want NOT_ENOUGH_REPLICAS_AFTER_APPEND", err)
		}
	})
}

// TestReplicaManager_ProduceTimesOut: acks=-1 whose batch does not commit
// in time answers REQUEST_TIMED_OUT (it may still commit later).
func TestReplicaManager_ProduceTimesOut(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	_, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 1, 0, 0), AcksAll, 30*time.Millisecond)
	if !isKerr(err, kerr.RequestTimedOut) {
		t.Fatalf("%v, want REQUEST_TIMED_OUT", err)
	}
	e.catchUp(2)
	e.fetch(2)
	if hw := e.hw(1); hw != 1 {
		t.Fatalf("high watermark %d: the timed-out batch should commit once 2 has it", hw)
	}
}

// TestReplicaManager_ProduceLosesLeadership: a produce waiting for the
// high watermark when the leadership moves answers NOT_LEADER_OR_FOLLOWER.
func TestReplicaManager_ProduceLosesLeadership(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	done := make(chan error, 1)
	go func() {
		_, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 1, 0, 0), AcksAll, 10*time.Second)
		done <- err
	}()
	poll.Until(t, 5*time.Second, "the batch appended", func() bool { return e.leo(1) == 1 })
	e.ctl.commit(changeRec(leaderID(2), []int32{2}))
	e.publish()
	select {
	case err := <-done:
		if !isKerr(err, kerr.NotLeaderForPartition) {
			t.Fatalf("%v, want NOT_LEADER_OR_FOLLOWER", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting produce did not answer when the leadership moved")
	}
}

// TestReplicaManager_IdempotentProducer: a retried batch answers its
// original offset and is not appended again; a gap in the sequence is
// OUT_OF_ORDER_SEQUENCE_NUMBER.
func TestReplicaManager_IdempotentProducer(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	m := e.ms[1]
	e.produce(1, 1)
	first, err := m.Produce(context.Background(), "t", 0, makeBatch(t, 2, 1000, 0), AcksAll, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Produce(context.Background(), "t", 0, makeBatch(t, 2, 1000, 0), AcksAll, time.Second)
	if err != nil || again.BaseOffset != first.BaseOffset || e.leo(1) != 3 {
		t.Fatalf("duplicate = %+v, %v (log end %d); want base offset %d, nothing appended", again, err, e.leo(1), first.BaseOffset)
	}
	if _, err := m.Produce(context.Background(), "t", 0, makeBatch(t, 1, 1000, 5), AcksAll, time.Second); !isKerr(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("sequence gap: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	bad := makeBatch(t, 1, 0, 0)
	bad[len(bad)-1] ^= 0xff
	if _, err := m.Produce(context.Background(), "t", 0, bad, AcksLeader, time.Second); !isKerr(err, kerr.CorruptMessage) {
		t.Fatalf("bad CRC: %v, want CORRUPT_MESSAGE", err)
	}
	if _, err := m.Produce(context.Background(), "t", 0, []byte("not a batch"), AcksLeader, time.Second); !isKerr(err, kerr.InvalidRecord) && !isKerr(err, kerr.CorruptMessage) {
		t.Fatalf("garbage: %v, want INVALID_RECORD", err)
	}
}

// TestReplicaManager_FetchRequests: a consumer reads only below the high
// watermark, from the leader, at its leader epoch (KIP-320).
func TestReplicaManager_FetchRequests(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	m := e.ms[1]
	e.produce(1, 2)
	e.catchUp(2)
	e.fetch(2)
	e.produce(1, 3) // not committed: 2 has not fetched it
	res, err := m.Fetch(context.Background(), "t", 0, -1, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := batchOffsets(res.Records); len(got) != 1 || got[0][0] != 0 || res.HighWatermark != 2 {
		t.Fatalf("fetch = batches %v, high watermark %d; want the batch at 0 only, HW 2", got, res.HighWatermark)
	}
	res, err = m.Fetch(context.Background(), "t", 0, 0, 2, 1<<20, 10*time.Millisecond)
	if err != nil || len(res.Records) != 0 {
		t.Fatalf("fetch at the high watermark = %d bytes, %v; want none", len(res.Records), err)
	}
	tests := []struct {
		name   string
		m      *Manager
		topic  string
		epoch  int32
		offset int64
		want   *kerr.Error
	}{
		// Kafka's bounds: a new leader's high watermark may lag the old
		// one's, so a consumer past it waits (an empty answer) until the
		// log end; only past the log end is its position gone.
		{name: "past the high watermark, within the log", m: m, topic: "t", epoch: -1, offset: 3},
		{name: "past the log end", m: m, topic: "t", epoch: -1, offset: 100, want: kerr.OffsetOutOfRange},
		{name: "at the leader epoch", m: m, topic: "t", epoch: 0, offset: 0},
		{name: "newer leader epoch", m: m, topic: "t", epoch: 1, offset: 0, want: kerr.UnknownLeaderEpoch},
		{name: "a follower", m: e.ms[2], topic: "t", epoch: -1, offset: 0, want: kerr.NotLeaderForPartition},
		{name: "unknown topic", m: m, topic: "nope", epoch: -1, offset: 0, want: kerr.UnknownTopicOrPartition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.m.Fetch(context.Background(), tt.topic, 0, tt.epoch, tt.offset, 1<<20, 0)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !isKerr(err, tt.want) {
				t.Fatalf("%v, want %v", err, tt.want)
			}
		})
	}
	// A new leader epoch fences a fetch at the old one.
	e.ctl.commit(changeRec(leaderID(2), []int32{2, 1}))
	e.ctl.commit(changeRec(leaderID(1), []int32{1, 2}))
	e.publish()
	if _, err := m.Fetch(context.Background(), "t", 0, 0, 0, 1<<20, 0); !isKerr(err, kerr.FencedLeaderEpoch) {
		t.Fatalf("fetch at epoch 0 with the leader at 2: %v, want FENCED_LEADER_EPOCH", err)
	}
}

// TestReplicaManager_Watch: a watch is woken by what a waiting consumer
// fetch waits for (an append, the high watermark moving, a leader change),
// and no more once stopped; a partition with no replica here is never woken.
func TestReplicaManager_Watch(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	m := e.ms[1]
	var wakes atomic.Int32
	stop := m.Watch("t", 0, func() { wakes.Add(1) })
	for _, step := range []struct {
		what string
		do   func()
	}{
		{"an append", func() { e.produce(1, 1) }},
		{"the high watermark moving", func() { e.catchUp(2); e.fetch(2) }},
		{"a leader change", func() {
			e.ctl.commit(changeRec(leaderID(2), []int32{2, 1}))
			e.publish()
		}},
	} {
		before := wakes.Load()
		step.do()
		if wakes.Load() == before {
			t.Fatalf("%s woke no watch", step.what)
		}
	}
	stop()
	before := wakes.Load()
	e.ctl.commit(changeRec(leaderID(1), []int32{1, 2}))
	e.publish()
	e.produce(1, 1)
	if n := wakes.Load() - before; n != 0 {
		t.Fatalf("a stopped watch was woken %d times", n)
	}
	m.Watch("nope", 0, func() { t.Error("a watch of an unknown topic was woken") })()
	m.Watch("t", 7, func() { t.Error("a watch of an unknown partition was woken") })()
}

// TestReplicaManager_ListOffsets: earliest is the log start, latest the
// high watermark; a new leader whose high watermark is below its epoch's
// start answers OFFSET_NOT_AVAILABLE (KIP-207).
func TestReplicaManager_ListOffsets(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 2)
	e.catchUp(2)
	e.fetch(2)
	e.produce(1, 2)
	if r, err := e.ms[1].ListOffsets(context.Background(), "t", 0, -1, -1); err != nil || r.Offset != 2 || r.LeaderEpoch != 0 {
		t.Fatalf("latest = %+v, %v; want 2 at epoch 0", r, err)
	}
	if r, err := e.ms[1].ListOffsets(context.Background(), "t", 0, -1, -2); err != nil || r.Offset != 0 {
		t.Fatalf("earliest = %+v, %v; want 0", r, err)
	}
	if _, err := e.ms[1].ListOffsets(context.Background(), "t", 0, -1, -4); !isKerr(err, kerr.InvalidRequest) {
		t.Fatalf("timestamp -4: %v, want INVALID_REQUEST", err)
	}
	e.fetch(2) // 2 has 0..4, last heard HW 2
	e.ctl.commit(changeRec(leaderID(2), []int32{2, 1}))
	e.publish()
	if _, err := e.ms[2].ListOffsets(context.Background(), "t", 0, -1, -1); !isKerr(err, kerr.OffsetNotAvailable) {
		t.Fatalf("latest on a new leader behind its epoch start: %v, want OFFSET_NOT_AVAILABLE", err)
	}
	if _, err := e.ms[2].ListOffsets(context.Background(), "t", 0, -1, math.MaxInt64); !isKerr(err, kerr.OffsetNotAvailable) {
		t.Fatalf("a timestamp past everything on a new leader behind its epoch start: %v, want OFFSET_NOT_AVAILABLE", err)
	}
	e.catchUp(1)
	e.fetch(1)
	if r, err := e.ms[2].ListOffsets(context.Background(), "t", 0, -1, -1); err != nil || r.Offset != 4 || r.LeaderEpoch != 1 {
		t.Fatalf("latest = %+v, %v; want 4 at epoch 1", r, err)
	}
}

// TestReplicaManager_ListOffsetsByTimestamp: Kafka's
// Partition.fetchOffsetForTimestamp (PartitionTest's
// testFetchOffsetForTimestampEpochValidationForLeader and
// testMonotonicOffsetsAfterLeaderChange): the first record stamped at or
// after the timestamp, with its own timestamp and its batch's epoch, and
// only below the high watermark; -3 the first record with the largest
// timestamp; nothing found is -1.
func TestReplicaManager_ListOffsetsByTimestamp(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	for _, ts := range []int64{1000, 3000, 2000} { // offsets 0-1, 2-3, 4-5
		if _, err := e.ms[1].Produce(context.Background(), "t", 0, batchAt(t, 2, ts), AcksLeader, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.catchUp(2)
	e.fetch(2) // the high watermark: 6
	if _, err := e.ms[1].Produce(context.Background(), "t", 0, batchAt(t, 2, 5000), AcksLeader, time.Second); err != nil {
		t.Fatal(err) // offsets 6-7, above the high watermark
	}
	none := broker.ListOffsetsResult{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
	for _, tc := range []struct {
		ts   int64
		want broker.ListOffsetsResult
	}{
		{0, broker.ListOffsetsResult{Offset: 0, Timestamp: 1000, LeaderEpoch: 0}},
		{1001, broker.ListOffsetsResult{Offset: 1, Timestamp: 1001, LeaderEpoch: 0}},
		{1002, broker.ListOffsetsResult{Offset: 2, Timestamp: 3000, LeaderEpoch: 0}},
		{3001, broker.ListOffsetsResult{Offset: 3, Timestamp: 3001, LeaderEpoch: 0}},
		{3002, none}, // only above the high watermark
		{MaxTimestamp, broker.ListOffsetsResult{Offset: 3, Timestamp: 3001, LeaderEpoch: 0}},
	} {
		if r, err := e.ms[1].ListOffsets(context.Background(), "t", 0, -1, tc.ts); err != nil || r != tc.want {
			t.Errorf("timestamp %d: %+v, %v; want %+v", tc.ts, r, err, tc.want)
		}
	}
	if _, err := e.ms[2].ListOffsets(context.Background(), "t", 0, -1, 0); !isKerr(err, kerr.NotLeaderForPartition) {
		t.Errorf("a follower: %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if _, err := e.ms[1].ListOffsets(context.Background(), "t", 0, 7, 0); !isKerr(err, kerr.UnknownLeaderEpoch) {
		t.Errorf("a newer current leader epoch: %v, want UNKNOWN_LEADER_EPOCH", err)
	}
}

// batchAt is a batch of n records stamped ts, ts+1, ....
func batchAt(t *testing.T, n int, ts int64) []byte {
	t.Helper()
	b := makeBatch(t, n, 0, 0)
	binary.BigEndian.PutUint64(b[27:], uint64(ts))
	binary.BigEndian.PutUint64(b[35:], uint64(ts+int64(n-1)))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestReplicaManager_StopReplicaDeletesLog: a replica removed for good loses
// its log directory; one stopped for a restart keeps it, and the next
// manager on the dir finds its records and high watermark.
func TestReplicaManager_StopReplicaDeletesLog(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	e.produce(1, 3)
	dir := filepath.Join(e.dirs[1], logsDir, logDirName(broker.TopicPartition{TopicID: topicT, Partition: 0}))
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	m := e.ms[1]
	m.StopReplica(topicT, 0, false)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	e.start(1)
	e.publish()
	if leo, hw := e.leo(1), e.hw(1); leo != 3 || hw != 3 {
		t.Fatalf("after a restart: log end %d, high watermark %d; want 3, 3", leo, hw)
	}
	e.ms[1].StopReplica(topicT, 0, true)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the deleted replica's log dir: %v", err)
	}
}

// TestReplicaManager_OffsetForLeaderEpoch: Kafka's
// OffsetsForLeaderEpochRequestTest (the error codes, the current leader
// epoch's fencing) and the leader-side answers of LeaderEpochFileCacheTest,
// on a leader whose log holds epochs 0 and 2 but not 1, which another
// broker led without it.
func TestReplicaManager_OffsetForLeaderEpoch(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 2) // offsets 0-1 at epoch 0
	e.catchUp(2)
	e.fetch(2)
	e.ctl.commit(changeRec(leaderID(2), []int32{2, 1}))
	e.publish()
	e.produce(2, 3) // offsets 2-4 at epoch 1, on broker 2 only
	e.ctl.commit(changeRec(leaderID(1), []int32{1, 2}))
	e.publish()
	e.produce(1, 1) // offset 2 at epoch 2: broker 1's log end is 3
	if got := e.replica(1).log.EpochEntries(); len(got) != 2 || got[0].Epoch != 0 || got[1].Epoch != 2 || got[1].StartOffset != 2 {
		t.Fatalf("broker 1's epochs %v, want [{0 0} {2 2}]", got)
	}
	tests := []struct {
		name          string
		broker        int32
		topic         string
		current, asks int32
		wantEnd       int64
		wantEpoch     int32
		wantErr       *kerr.Error
	}{
		{name: "the current epoch ends at the log end", broker: 1, topic: "t", current: -1, asks: 2, wantEnd: 3, wantEpoch: 2},
		{name: "at the current leader epoch", broker: 1, topic: "t", current: 2, asks: 2, wantEnd: 3, wantEpoch: 2},
		{name: "an earlier epoch ends where the next starts", broker: 1, topic: "t", current: 2, asks: 0, wantEnd: 2, wantEpoch: 0},
		{name: "an epoch this log lacks answers the largest below it", broker: 1, topic: "t", current: -1, asks: 1, wantEnd: 2, wantEpoch: 0},
		{name: "an epoch above every one known is undefined", broker: 1, topic: "t", current: -1, asks: 3, wantEnd: -1, wantEpoch: -1},
		{name: "no epoch is undefined", broker: 1, topic: "t", current: -1, asks: -1, wantEnd: -1, wantEpoch: -1},
		{name: "an older current leader epoch is fenced", broker: 1, topic: "t", current: 1, asks: 0, wantErr: kerr.FencedLeaderEpoch},
		{name: "a newer current leader epoch is unknown", broker: 1, topic: "t", current: 3, asks: 0, wantErr: kerr.UnknownLeaderEpoch},
		{name: "a follower does not answer", broker: 2, topic: "t", current: -1, asks: 0, wantErr: kerr.NotLeaderForPartition},
		{name: "a follower out of the ISR", broker: 3, topic: "t", current: -1, asks: 0, wantErr: kerr.NotLeaderForPartition},
		{name: "an unknown topic", broker: 1, topic: "nope", current: -1, asks: 0, wantErr: kerr.UnknownTopicOrPartition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end, epoch, err := e.ms[tt.broker].OffsetForLeaderEpoch(context.Background(), tt.topic, 0, tt.current, tt.asks)
			if tt.wantErr != nil {
				if !isKerr(err, tt.wantErr) {
					t.Fatalf("%v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || end != tt.wantEnd || epoch != tt.wantEpoch {
				t.Fatalf("= (%d, %d, %v), want (%d, %d)", end, epoch, err, tt.wantEnd, tt.wantEpoch)
			}
		})
	}
}

// TestReplicaManager_LogDirFailure (Kafka's log dir failure handling): a
// write the leader's log cannot store (here a segment roll, into a
// directory that is gone, as on a broken disk) is refused with
// KAFKA_STORAGE_ERROR, and the failure is delivered on Failed once, for the
// broker to stop; Close then says the log was not flushed, so that no
// clean shutdown is recorded.
func TestReplicaManager_LogDirFailure(t *testing.T) {
	e := newEnv(t, clusterImage(t, map[string]string{fsm.SegmentBytes: "1048576"}, 1, 2, 3))
	m := e.ms[1]
	// Two batches of about 600 KiB: the second rolls the segment.
	big := makeBatch(t, 30000, 0, 0)
	if _, err := m.Produce(context.Background(), "t", 0, big, AcksLeader, time.Second); err != nil {
		t.Fatalf("first produce: %v", err)
	}
	dir := filepath.Join(e.dirs[1], logsDir, logDirName(broker.TopicPartition{TopicID: topicT, Partition: 0}))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := m.Produce(context.Background(), "t", 0, big, AcksLeader, time.Second)
		if !isKerr(err, kerr.KafkaStorageError) {
			t.Fatalf("produce %d to a log whose directory is gone: %v; want KAFKA_STORAGE_ERROR", i, err)
		}
	}
	select {
	case err := <-m.Failed():
		if err == nil {
			t.Fatal("Failed delivered a nil error")
		}
	default:
		t.Fatal("the failed write was not delivered on Failed")
	}
	select {
	case err := <-m.Failed():
		t.Fatalf("Failed delivered a second failure (%v); want the first only", err)
	default:
	}
	if err := m.Close(); err == nil {
		t.Error("Close after a failed write: no error; want the failed log reported (not flushed)")
	}
	delete(e.ms, 1) // closed here; the env's cleanup closes the others
}

// TestReplicaManager_FormerLeaderWithEmptyEpochCatchesUp: broker 2 becomes
// leader (its epoch starts at its log end) and loses the leadership to
// broker 3 before it appends anything. Its log's last epoch is one broker 3
// never saw, so its first fetch diverges at its own log end: it must drop
// that epoch and go on, not fetch the same divergence for ever.
func TestReplicaManager_FormerLeaderWithEmptyEpochCatchesUp(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 3)
	e.catchUp(2)
	e.catchUp(3)
	e.ctl.commit(changeRec(leaderID(2), []int32{2, 3, 1}))
	e.publish()
	if last, ok := e.replica(2).log.LatestEpoch(); !ok || last != 1 {
		t.Fatalf("broker 2 leading: latest epoch %d, %v; want 1", last, ok)
	}
	e.ctl.commit(changeRec(leaderID(3), []int32{3, 1, 2}))
	e.publish()
	e.produce(3, 2)
	for range 5 {
		if err := e.fetch(2); err != nil {
			t.Fatalf("broker 2 fetch: %v", err)
		}
	}
	if got := e.leo(2); got != 5 {
		t.Errorf("broker 2's log end after 5 fetches from broker 3: %d; want 5 (it is stuck on its empty epoch)", got)
	}
	if last, ok := e.replica(2).log.LatestEpoch(); !ok || last != 2 {
		t.Errorf("broker 2's latest epoch: %d, %v; want broker 3's, 2", last, ok)
	}
}
