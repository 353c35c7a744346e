package integration

import (
	"context"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// rawBatch is a v2 batch of one record, exactly size bytes long, stamped
// at ts (Unix milliseconds), not idempotent.
func rawBatch(t *testing.T, size int, ts int64) []byte {
	t.Helper()
	build := func(n int) []byte {
		rec := kmsg.Record{Value: make([]byte, n)}
		rec.Length = int32(len(rec.AppendTo(nil)) - 1)
		rec.Length = int32(len(rec.AppendTo(nil)) - varintLen(int64(rec.Length)))
		b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
			NumRecords: 1, Records: rec.AppendTo(nil), FirstTimestamp: ts, MaxTimestamp: ts}
		b.Length = int32(len(b.AppendTo(nil)) - 12)
		raw := b.AppendTo(nil)
		b.CRC = int32(crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
		return b.AppendTo(nil)
	}
	n := max(size-80, 0)
	for range 4 {
		got := len(build(n))
		if got == size {
			return build(n)
		}
		n += size - got
	}
	t.Fatalf("cannot build a batch of exactly %d bytes", size)
	return nil
}

// varintLen is the length of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// produceTo sends records to partition 0 of topic on broker id with
// acks=all, and returns the partition's answer.
func produceTo(t *testing.T, cl *kgo.Client, id int32, topic string, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	resp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatalf("produce to broker %d: %v", id, err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// produceAnswered is produceTo repeated while the broker has not replayed
// the topic or its leadership yet (the controller has committed it, the
// broker's image may be a moment behind): the first answer about the
// batch itself.
func produceAnswered(t *testing.T, cl *kgo.Client, id int32, topic string, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	var p kmsg.ProduceResponseTopicPartition
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d answering for %s", id, topic), func() (bool, string) {
		p = produceTo(t, cl, id, topic, records)
		switch p.ErrorCode {
		case kerr.UnknownTopicOrPartition.Code, kerr.NotLeaderForPartition.Code:
			return false, kerr.ErrorForCode(p.ErrorCode).Error()
		}
		return true, ""
	})
	return p
}

// fullyLed waits until partition 0 of topic has a leader and all three
// replicas in its ISR, and returns the leader.
func fullyLed(t *testing.T, c *Cluster, topic string) int32 {
	t.Helper()
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	return d.Partitions[0].Leader
}

// TestTopicConfigs_MaxMessageBytesOnEveryBroker: max.message.bytes is the
// topic's, at any size, on whichever broker leads, as soon as it changes:
// a 2,000,074-byte batch goes to a topic set to 3,000,000 (the listener
// capped every batch at 1 MiB); lowered to 2,000 with `keel topic alter`,
// a 3,070-byte batch is MESSAGE_TOO_LARGE on the leader at once (the log
// read the limit when it opened), and on the next leader after a kill -9.
func TestTopicConfigs_MaxMessageBytesOnEveryBroker(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "big"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "max.message.bytes=3000000")
	leader := fullyLed(t, c, topic)
	cl := kafkaClient(t, kafka)

	if p := produceAnswered(t, cl, leader, topic, rawBatch(t, 2_000_074, time.Now().UnixMilli())); p.ErrorCode != 0 {
		t.Fatalf("a 2,000,074-byte batch to a topic set to 3,000,000: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	var a alteredJSON
	c.keelJSON(t, &a, "topic", "alter", topic, "--config", "max.message.bytes=2000")
	small := rawBatch(t, 3_070, time.Now().UnixMilli())
	// The change is committed; the leader refuses once it has replayed it,
	// with no log reopened: within the broker's metadata lag.
	poll.UntilState(t, 5*time.Second, "the leader refusing a 3,070-byte batch", func() (bool, string) {
		p := produceTo(t, cl, leader, topic, small)
		return p.ErrorCode == kerr.MessageTooLarge.Code, fmt.Sprintf("broker %d answered %v", leader, kerr.ErrorForCode(p.ErrorCode))
	})
	if p := produceTo(t, cl, leader, topic, rawBatch(t, 1_500, time.Now().UnixMilli())); p.ErrorCode != 0 {
		t.Fatalf("a 1,500-byte batch under the lowered limit: %v", kerr.ErrorForCode(p.ErrorCode))
	}

	c.KillBroker(leader)
	d := c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", leader), func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != leader
	})
	next := d.Partitions[0].Leader
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d leading and refusing a 3,070-byte batch", next), func() (bool, string) {
		p := produceTo(t, cl, next, topic, small)
		return p.ErrorCode == kerr.MessageTooLarge.Code, fmt.Sprintf("broker %d answered %v", next, kerr.ErrorForCode(p.ErrorCode))
	})
}

// TestTopicConfigs_TimestampsAndSegmentMs: a LogAppendTime topic's
// produce is answered with log_append_time_ms, and a consumer reads the
// broker's time, not the producer's; a CreateTime record two hours ahead
// of the broker is INVALID_TIMESTAMP (Kafka 4's message.timestamp
// .after.max.ms); and a topic altered to segment.ms=1000 rolls its
// leader's active segment once it is a second old.
func TestTopicConfigs_TimestampsAndSegmentMs(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	cl := kafkaClient(t, kafka)

	const stamped = "stamped"
	c.createTopic(t, stamped, "--partitions", "1", "--replication-factor", "3", "--config", "message.timestamp.type=LogAppendTime")
	leader := fullyLed(t, c, stamped)
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	sent := time.Now().UnixMilli()
	p := produceAnswered(t, cl, leader, stamped, rawBatch(t, 200, hourAgo))
	if p.ErrorCode != 0 || p.LogAppendTime < sent || p.LogAppendTime > time.Now().UnixMilli() {
		t.Fatalf("produce to a LogAppendTime topic: %v, log_append_time_ms %d; want the broker's time, from %d", kerr.ErrorForCode(p.ErrorCode), p.LogAppendTime, sent)
	}
	consumer := kafkaClient(t, kafka, kgo.ConsumeTopics(stamped), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got *kgo.Record
	poll.UntilState(t, kafkaTimeout, "the LogAppendTime record", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		fs := consumer.PollFetches(ctx)
		if recs := fs.Records(); len(recs) > 0 {
			got = recs[0]
			return true, ""
		}
		return false, fmt.Sprintf("fetch errors: %v", fs.Errors())
	})
	if got.Timestamp.UnixMilli() != p.LogAppendTime || got.Attrs.TimestampType() != 1 {
		t.Errorf("consumed timestamp %d (type %d); want the broker's %d, LogAppendTime (1)", got.Timestamp.UnixMilli(), got.Attrs.TimestampType(), p.LogAppendTime)
	}

	const created = "created"
	c.createTopic(t, created, "--partitions", "1", "--replication-factor", "3")
	leader = fullyLed(t, c, created)
	if p := produceAnswered(t, cl, leader, created, rawBatch(t, 200, time.Now().Add(2*time.Hour).UnixMilli())); p.ErrorCode != kerr.InvalidTimestamp.Code {
		t.Errorf("a record two hours ahead: %v; want INVALID_TIMESTAMP", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceTo(t, cl, leader, created, rawBatch(t, 200, hourAgo)); p.ErrorCode != 0 || p.LogAppendTime != -1 {
		t.Errorf("a record an hour old to a CreateTime topic: %v, log_append_time_ms %d; want it taken, -1", kerr.ErrorForCode(p.ErrorCode), p.LogAppendTime)
	}

	var a alteredJSON
	c.keelJSON(t, &a, "topic", "alter", created, "--config", "segment.ms=1000")
	segments := filepath.Join(c.BrokerDataDir(leader), "logs", c.cliDescribe(t, created).ID+"-0", "*.log")
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d rolling a segment by age", leader), func() (bool, string) {
		if p := produceTo(t, cl, leader, created, rawBatch(t, 200, time.Now().UnixMilli())); p.ErrorCode != 0 {
			return false, kerr.ErrorForCode(p.ErrorCode).Error()
		}
		files, _ := filepath.Glob(segments)
		return len(files) >= 2, fmt.Sprintf("segments %v", files)
	})
}
