package kafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listOffsetsAt asks one partition's ListOffsets at version for timestamp.
func listOffsetsAt(t *testing.T, addr string, version int16, topic string, timestamp int64) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.ReplicaID = version, -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp, rp.MaxNumOffsets = timestamp, 1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrListOffsetsResponse()
	rawRequest(t, addr, req, resp)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("v%d answer %+v: want one partition", version, resp)
	}
	return resp.Topics[0].Partitions[0]
}

// produceAt produces one record per timestamp, each its own batch, to
// topic's partition 0.
func produceAt(t *testing.T, cl *kgo.Client, topic string, stamps ...int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, ts := range stamps {
		r := &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "at-%d", ts), Timestamp: time.UnixMilli(ts)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce at %d: %v", ts, err)
		}
	}
}

// TestServer_ListOffsetsByTimestamp: the listener's ListOffsets answers
// by timestamp (KIP-79) at v1-v7 and v0's list, and -3 (KIP-734) from v7,
// in the cases of Kafka's ListOffsetsRequestTest
// (testResponseIncludesLeaderEpoch, testListOffsetsMaxTimeStampOldestVersion).
func TestServer_ListOffsetsByTimestamp(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("times", []int32{1})
	cl := newClient(t, []string{s.Addr()}, kgo.ProducerLinger(0))
	produceAt(t, cl, "times", 1000, 3000, 2000) // offsets 0, 1, 2

	for _, tc := range []struct {
		name       string
		version    int16
		timestamp  int64
		wantCode   int16
		wantOffset int64
		wantTS     int64
	}{
		{"earliest", 7, -2, 0, 0, -1},
		{"latest", 7, -1, 0, 3, -1},
		{"before everything", 7, 0, 0, 0, 1000},
		{"an earlier offset beats an earlier timestamp", 7, 1500, 0, 1, 3000},
		{"exactly a record's", 7, 2000, 0, 1, 3000},
		{"after everything", 7, 3001, 0, -1, -1},
		{"max timestamp", 7, -3, 0, 1, 3000},
		{"max timestamp before v7", 6, -3, kerr.UnsupportedVersion.Code, 0, 0},
		{"by timestamp at v1", 1, 1500, 0, 1, 3000},
		{"an unknown negative timestamp", 7, -4, kerr.InvalidRequest.Code, 0, 0},
	} {
		p := listOffsetsAt(t, s.Addr(), tc.version, "times", tc.timestamp)
		if p.ErrorCode != tc.wantCode {
			t.Errorf("%s: error %v, want %v", tc.name, kerr.ErrorForCode(p.ErrorCode), kerr.ErrorForCode(tc.wantCode))
			continue
		}
		if tc.wantCode == 0 && (p.Offset != tc.wantOffset || p.Timestamp != tc.wantTS) {
			t.Errorf("%s: offset %d at %d, want %d at %d", tc.name, p.Offset, p.Timestamp, tc.wantOffset, tc.wantTS)
		}
	}
	if p := listOffsetsAt(t, s.Addr(), 0, "times", 1500); p.ErrorCode != 0 || !slices.Equal(p.OldStyleOffsets, []int64{1}) {
		t.Errorf("v0 by timestamp: %v, offsets %v; want [1]", kerr.ErrorForCode(p.ErrorCode), p.OldStyleOffsets)
	}
	if p := listOffsetsAt(t, s.Addr(), 0, "times", 3001); p.ErrorCode != 0 || len(p.OldStyleOffsets) != 0 {
		t.Errorf("v0 after everything: %v, offsets %v; want none", kerr.ErrorForCode(p.ErrorCode), p.OldStyleOffsets)
	}
}

// TestServer_KgoResetsByTime: franz-go consumers that start by time
// (AfterMilli: the first record at or after a time; LookbackOffset: a
// duration before the newest record, from ListOffsets -3) start where
// ListOffsets says, and one whose time is past every record starts at the
// end and reads what comes next.
func TestServer_KgoResetsByTime(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("times", []int32{1})
	producer := newClient(t, []string{s.Addr()}, kgo.ProducerLinger(0))
	produceAt(t, producer, "times", 1000, 2000, 3000, 4000) // offsets 0-3

	for _, tc := range []struct {
		name  string
		reset kgo.Offset
		first int64
	}{
		{"after a time", kgo.NewOffset().AfterMilli(2500), 2},
		{"before every record", kgo.NewOffset().AfterMilli(0), 0},
		{"a duration before the newest record", kgo.LookbackOffset(2 * time.Second), 1},
	} {
		cl := newClient(t, []string{s.Addr()}, kgo.FetchMaxWait(100*time.Millisecond),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"times": {0: tc.reset}}))
		recs, _ := pollUntil(t, cl, int(4-tc.first))
		if recs[0].Offset != tc.first {
			t.Errorf("%s: first record at offset %d, want %d", tc.name, recs[0].Offset, tc.first)
		}
		cl.Close()
	}

	cl := newClient(t, []string{s.Addr()}, kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"times": {0: kgo.NewOffset().AfterMilli(time.Now().UnixMilli())}}))
	// The consumer has listed its offset (the end) once it has fetched.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	cl.PollFetches(ctx)
	cancel()
	produceAt(t, producer, "times", time.Now().UnixMilli())
	if recs, _ := pollUntil(t, cl, 1); recs[0].Offset != 4 {
		t.Errorf("after every record: first record at offset %d, want 4 (the end)", recs[0].Offset)
	}
}
