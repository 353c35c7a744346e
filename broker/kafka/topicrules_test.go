package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// topicConfig is a ConfigRecord setting a topic's config.
func topicConfig(topic, name, value string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
		ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, ResourceName: topic, Name: name, Value: &value}}}
}

// TestServer_TopicConfigsOnEveryProduce: max.message.bytes and the
// timestamp configs are read from the image on every produce: a batch
// above 1 MiB goes to a topic that allows it, a lowered limit refuses the
// next batch at once, a CreateTime record an hour and more ahead of the
// broker is INVALID_TIMESTAMP (Kafka 4's after.max.ms), and a
// LogAppendTime topic answers with the time the leader stamped, which a
// consumer reads as every record's timestamp.
func TestServer_TopicConfigsOnEveryProduce(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	meta.must(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{
		Name: fsm.MetadataVersionFeature, Level: fsm.TopicConfigsMetadataVersion}}})
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("big", []int32{1})
	meta.createTopic("stamped", []int32{1})
	meta.must(topicConfig("big", fsm.MaxMessageBytes, "3000000"), topicConfig("stamped", fsm.MessageTimestampType, fsm.LogAppendTime))
	cl := newClient(t, []string{s.Addr()})
	seedMetadata(t, cl)

	code := func(topic string, records []byte) error {
		return kerr.ErrorForCode(produceBytes(t, cl, 1, topic, 0, records).Topics[0].Partitions[0].ErrorCode)
	}
	if err := code("big", batchOf(make([]byte, 2_000_000))); err != nil {
		t.Fatalf("a 2 MB batch to a topic allowing 3,000,000 bytes: %v", err)
	}
	meta.must(topicConfig("big", fsm.MaxMessageBytes, "2000"))
	if err := code("big", batchOf(make([]byte, 3000))); err != kerr.MessageTooLarge {
		t.Fatalf("a 3,070-byte batch once the limit is 2,000: %v, want MESSAGE_TOO_LARGE", err)
	}

	future := batchOf([]byte("x"))
	b := kgoBatch(t, future)
	b.FirstTimestamp += (2 * time.Hour).Milliseconds()
	b.MaxTimestamp = b.FirstTimestamp
	if err := code("big", rebatch(b)); err != kerr.InvalidTimestamp {
		t.Fatalf("a record two hours ahead: %v, want INVALID_TIMESTAMP", err)
	}

	before := time.Now().UnixMilli()
	old := kgoBatch(t, batchOf([]byte("v")))
	old.FirstTimestamp, old.MaxTimestamp = 1000, 1000
	resp := produceBytes(t, cl, 1, "stamped", 0, rebatch(old))
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.LogAppendTime < before || p.LogAppendTime > time.Now().UnixMilli() {
		t.Fatalf("LogAppendTime topic: error %v, log_append_time_ms %d (sent at %d)", kerr.ErrorForCode(p.ErrorCode), p.LogAppendTime, before)
	}
	consumer := newClient(t, []string{s.Addr()}, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"stamped": {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	fs := consumer.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || recs[0].Timestamp.UnixMilli() != p.LogAppendTime || recs[0].Attrs.TimestampType() != 1 {
		t.Fatalf("consumed %d records; first timestamp %v type %d, want %d, LogAppendTime", len(recs), recs[0].Timestamp.UnixMilli(), recs[0].Attrs.TimestampType(), p.LogAppendTime)
	}
}

// kgoBatch parses a batch batchOf made.
func kgoBatch(t *testing.T, raw []byte) kmsg.RecordBatch {
	t.Helper()
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	return b
}

// rebatch encodes b again with its CRC.
func rebatch(b kmsg.RecordBatch) []byte {
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32c(raw[21:]))
	return b.AppendTo(nil)
}

// BenchmarkTopicRules: what reading a topic's produce rules costs, once
// per topic of every produce request: from the image, and from the cache
// of the image's rules.
func BenchmarkTopicRules(b *testing.B) {
	meta := newFakeMeta(b)
	meta.createTopic("t", []int32{1})
	meta.must(topicConfig("t", fsm.MaxMessageBytes, "3000000"))
	img := meta.Image()
	b.Run("image", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := topicRulesOf(img, "t"); r.maxBytes != 3000000 {
				b.Fatal(r)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		var s Server
		b.ReportAllocs()
		for b.Loop() {
			if r := s.topicRules(img, "t"); r.maxBytes != 3000000 {
				b.Fatal(r)
			}
		}
	})
}
