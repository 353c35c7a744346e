package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawRequest sends req at its version over a connection of its own, as a
// client's bytes, and reads the answer into resp (of the same version).
func rawRequest(t *testing.T, addr string, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	var body []byte
	if req.IsFlexible() {
		body = append(body, 0) // the request header's tags
	}
	body = req.AppendTo(body)
	c := dial(t, addr)
	writeFrame(t, c, frame(req.Key(), req.GetVersion(), 5, body))
	raw := readFrame(t, c)
	if corr := int32(binary.BigEndian.Uint32(raw)); corr != 5 {
		t.Fatalf("correlation id %d, want 5", corr)
	}
	raw = raw[4:]
	if req.IsFlexible() {
		raw = raw[1:] // the response header's tags
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(raw); err != nil {
		t.Fatalf("%s v%d answer: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
}

// offsetForLeaderEpochAt asks one partition's OffsetForLeaderEpoch at
// version.
func offsetForLeaderEpochAt(t *testing.T, addr string, version int16, topic string, partition, current, asks int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version, req.ReplicaID = version, -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = partition, current, asks
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	rawRequest(t, addr, req, resp)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Topic != topic {
		t.Fatalf("v%d answer %+v: want one partition of %s", version, resp, topic)
	}
	return resp.Topics[0].Partitions[0]
}

// TestServer_OffsetForLeaderEpoch: the listener's answers at v2-v4, in
// the cases of Kafka's OffsetsForLeaderEpochRequestTest (errors, fencing
// by the current leader epoch) and LeaderEpochFileCacheTest (which epoch
// and end offset), on a partition whose log holds epoch 0 (offsets 0-2)
// and epoch 2 (offset 3), never epoch 1.
func TestServer_OffsetForLeaderEpoch(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.addBroker(2, "127.0.0.1:1") // another broker, never dialled
	meta.createTopic("e", []int32{1})
	meta.createTopic("theirs", []int32{2})
	meta.createTopic("refused", []int32{1})
	backend.setRefusal("refused", 0, fmt.Errorf("the log failed: %w", kerr.KafkaStorageError))
	cl := newClient(t, []string{s.Addr()})
	seedMetadata(t, cl)
	for i := range 3 {
		if code := produceRaw(t, cl, 1, "e", 0, fmt.Appendf(nil, "v%d", i)).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatal(kerr.ErrorForCode(code))
		}
	}
	backend.newLeaderEpoch("e", 0, 2, -1)
	if code := produceRaw(t, cl, 1, "e", 0, []byte("v3")).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}

	tests := []struct {
		name          string
		topic         string
		partition     int32
		current, asks int32
		wantEnd       int64
		wantEpoch     int32
		want          *kerr.Error
	}{
		{name: "the current epoch ends at the log end", topic: "e", current: 2, asks: 2, wantEnd: 4, wantEpoch: 2},
		{name: "no current epoch given", topic: "e", current: -1, asks: 2, wantEnd: 4, wantEpoch: 2},
		{name: "an earlier epoch ends where the next starts", topic: "e", current: 2, asks: 0, wantEnd: 3, wantEpoch: 0},
		{name: "an epoch the log lacks answers the largest below it", topic: "e", current: 2, asks: 1, wantEnd: 3, wantEpoch: 0},
		{name: "an epoch above every one known is undefined", topic: "e", current: 2, asks: 3, wantEnd: -1, wantEpoch: -1},
		{name: "an older current leader epoch is fenced", topic: "e", current: 1, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.FencedLeaderEpoch},
		{name: "a newer current leader epoch is unknown", topic: "e", current: 3, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.UnknownLeaderEpoch},
		{name: "another broker leads", topic: "theirs", current: -1, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.NotLeaderForPartition},
		{name: "unknown topic", topic: "nope", current: -1, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.UnknownTopicOrPartition},
		{name: "unknown partition", topic: "e", partition: 7, current: -1, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.UnknownTopicOrPartition},
		{name: "the data plane refuses, wrapped", topic: "refused", current: -1, asks: 0, wantEnd: -1, wantEpoch: -1, want: kerr.KafkaStorageError},
	}
	for _, version := range []int16{2, 3, 4} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				p := offsetForLeaderEpochAt(t, s.Addr(), version, tt.topic, tt.partition, tt.current, tt.asks)
				var want int16
				if tt.want != nil {
					want = tt.want.Code
				}
				if p.ErrorCode != want || p.Partition != tt.partition || p.EndOffset != tt.wantEnd || p.LeaderEpoch != tt.wantEpoch {
					t.Fatalf("answer: %v, partition %d, end offset %d, epoch %d; want %v, %d, %d, %d",
						kerr.ErrorForCode(p.ErrorCode), p.Partition, p.EndOffset, p.LeaderEpoch, tt.want, tt.partition, tt.wantEnd, tt.wantEpoch)
				}
			})
		}
	}
}

// requestCounter counts the requests a kgo client writes, by broker and
// API key.
type requestCounter struct {
	mu sync.Mutex
	n  map[[2]int32]int
}

func (c *requestCounter) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[[2]int32{meta.NodeID, int32(key)}]++
}

func (c *requestCounter) count(broker int32, key kmsg.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[[2]int32{broker, int32(key)}]
}

// consumer is a kgo client reading topic's partition 0 from the start,
// from seed, counting its requests.
func consumer(t *testing.T, seed, topic string) (*kgo.Client, *requestCounter) {
	t.Helper()
	counter := &requestCounter{n: map[[2]int32]int{}}
	cl := newClient(t, []string{seed}, kgo.WithHooks(counter), kgo.FetchMaxWait(100*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	return cl, counter
}

// pollUntil polls cl until it has n records, returning them and the data
// losses it reported.
func pollUntil(t *testing.T, cl *kgo.Client, n int) (recs []*kgo.Record, losses []*kgo.ErrDataLoss) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(recs), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			switch {
			case errors.As(err, &loss):
				losses = append(losses, loss)
			case !errors.Is(err, context.DeadlineExceeded):
				t.Logf("fetch error %s/%d: %v", topic, p, err)
			}
		})
		recs = append(recs, fs.Records()...)
	}
	return recs, losses
}

// TestServer_KgoValidatesAfterLeaderChange: franz-go, which validates its
// position with OffsetForLeaderEpoch after a leader change once the
// brokers list it (KIP-320), asks the new leader, and (1) goes on where it
// was when the new leader has its records, (2) reports ErrDataLoss and
// moves back to the new leader's end of the epoch it consumed when it
// does not (an unclean election cut the log).
func TestServer_KgoValidatesAfterLeaderChange(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s1 := startServer(t, 1, meta, backend, nil)
	startServer(t, 2, meta, backend, nil)
	producer := newClient(t, []string{s1.Addr()}, kgo.MetadataMinAge(50*time.Millisecond))
	produce := func(topic string, values ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		for _, v := range values { // one batch each
			if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
	}

	for _, tc := range []struct {
		name       string
		truncateTo int64 // the new leader's log end, -1 for all of it
		wantLoss   bool
	}{
		{name: "the new leader has every record", truncateTo: -1},
		{name: "the new leader lacks the last two", truncateTo: 3, wantLoss: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("moves-%v", tc.wantLoss)
			meta.createTopic(topic, []int32{1, 2})
			produce(topic, "a", "b", "c", "d", "e")
			cl, counter := consumer(t, s1.Addr(), topic)
			before, _ := pollUntil(t, cl, 5)
			if before[4].LeaderEpoch != 0 {
				t.Fatalf("consumed at leader epoch %d, want 0", before[4].LeaderEpoch)
			}

			backend.newLeaderEpoch(topic, 0, 1, tc.truncateTo)
			meta.moveLeader(topic, 0, 2)
			produce(topic, "f")
			after, losses := pollUntil(t, cl, 1)

			if n := counter.count(2, kmsg.OffsetForLeaderEpoch); n == 0 {
				t.Fatal("the consumer never sent OffsetForLeaderEpoch to the new leader")
			}
			last := after[len(after)-1]
			switch {
			case tc.wantLoss:
				if len(losses) != 1 || losses[0].ConsumedTo != 5 || losses[0].ResetTo != 3 {
					t.Fatalf("data losses %+v, want one from 5 back to 3", losses)
				}
				if last.Offset != 3 || string(last.Value) != "f" || last.LeaderEpoch != 1 {
					t.Fatalf("after the loss: offset %d %q at epoch %d, want 3 \"f\" at 1", last.Offset, last.Value, last.LeaderEpoch)
				}
			default:
				if len(losses) != 0 {
					t.Fatalf("data losses %+v, want none", losses)
				}
				if len(after) != 1 || last.Offset != 5 || string(last.Value) != "f" || last.LeaderEpoch != 1 {
					t.Fatalf("after the move: %d records, last offset %d %q at epoch %d; want one, 5 \"f\" at 1", len(after), last.Offset, last.Value, last.LeaderEpoch)
				}
			}
		})
	}
}
