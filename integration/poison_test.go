package integration

// Poison batches (issue 27, item 4): raw Produce requests whose batches no
// consumer could read, sent to a partition's leader between good records.
// Each must be refused with Kafka's error for it, none may take an offset,
// and every client must then read the partition to its end and find
// exactly the good records.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// poisonRecords is n records "poison-<i>", uncompressed.
func poisonRecords(n int) []byte {
	var out []byte
	for i := range n {
		r := kmsg.Record{OffsetDelta: int32(i), Value: fmt.Appendf(nil, "poison-%d", i)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the length's own varint, 0, is one byte
		out = r.AppendTo(out)
	}
	return out
}

// poisonBatch is a v2 batch of count records whose bytes are body, under
// codec, with a CRC that matches (unless the caller breaks it).
func poisonBatch(codec int16, count int32, body []byte) []byte {
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: codec, LastOffsetDelta: count - 1,
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: count, Records: body}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}

// compressed is body under gzip (1) or zstd (4).
func compressed(t *testing.T, codec int16, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch codec {
	case 1:
		w := gzip.NewWriter(&buf)
		_, err = w.Write(body)
		err = errors.Join(err, w.Close())
	case 4:
		var w *zstd.Encoder
		if w, err = zstd.NewWriter(&buf); err == nil {
			_, err = w.Write(body)
			err = errors.Join(err, w.Close())
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipBomb is a zstd batch of one record whose value is 256 MiB of zeros,
// four times the bound: a few KiB on the wire, within message.max.bytes.
func zipBomb(t *testing.T) []byte {
	t.Helper()
	const n = 256 << 20
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	// length, attributes, timestamp delta, offset delta, null key, value
	// length; the value; no headers.
	fields := binary.AppendVarint([]byte{0, 0, 0, 1}, n)
	head := append(binary.AppendVarint(nil, int64(len(fields))+n+1), fields...)
	zeros := make([]byte, 4<<20)
	_, err = w.Write(head)
	for left := n; left > 0 && err == nil; left -= len(zeros) {
		_, err = w.Write(zeros[:min(left, len(zeros))])
	}
	if err == nil {
		_, err = w.Write([]byte{0})
	}
	if err = errors.Join(err, w.Close()); err != nil {
		t.Fatal(err)
	}
	return poisonBatch(4, 1, buf.Bytes())
}

// poisonCase is a batch and the error its partition must get.
type poisonCase struct {
	name  string
	batch []byte
	want  *kerr.Error
}

func poisonCases(t *testing.T) []poisonCase {
	five := poisonRecords(5)
	badCRC := poisonBatch(0, 5, five)
	badCRC[len(badCRC)-1] ^= 0x01
	garbage := poisonBatch(0, 5, bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 32))
	control := poisonBatch(0, 5, five)
	control[22] |= 0x20 // the control bit of the attributes' low byte
	binary.BigEndian.PutUint32(control[17:], crc32.Checksum(control[21:], crc32.MakeTable(crc32.Castagnoli)))
	return []poisonCase{
		{"a gzip flag over raw records", poisonBatch(1, 5, five), kerr.CorruptMessage},
		{"garbage records under a good CRC", garbage, kerr.InvalidRecord},
		{"a records count that lies", poisonBatch(0, 6, five), kerr.InvalidRecord},
		{"gzipped records whose count lies", poisonBatch(1, 4, compressed(t, 1, five)), kerr.InvalidRecord},
		{"a bad CRC", badCRC, kerr.CorruptMessage},
		{"a control batch", control, kerr.InvalidRecord},
		{"a zip bomb (zstd, 256 MiB inflated)", zipBomb(t), kerr.MessageTooLarge},
	}
}

// rawProduce sends one Produce request, acks=all, of batch to topic's
// partition part on broker id, and returns its partition's answer.
func rawProduce(ctx context.Context, cl *kgo.Client, id int32, topic string, part int32, batch []byte) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = part, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, fmt.Errorf("produce to broker %d: %w", id, err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0], nil
}

// poisonedPartition produces good records to a new RF-3, acks=all
// partition, then each poison batch to its leader, checking the error
// each gets, then more good records. It returns the cluster's Kafka
// listeners, the topic, and the values acknowledged, in offset order:
// all that the partition may hold.
func poisonedPartition(t *testing.T) (map[int32]string, string, []string) {
	t.Helper()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "poisoned"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	var good producedLog
	good.produce(t, kafka, topic, "before", 50, "before the poison")

	leader := d.partition(t, 0).Leader
	cl := kafkaClient(t, kafka)
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	// The bomb must not inflate in the leader: its peak resident set
	// (VmHWM) grows by far less than the bomb's 256 MiB.
	pid := c.broker(leader).Pid()
	before := peakRSS(t, pid)
	for _, pc := range poisonCases(t) {
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		p, err := rawProduce(ctx, cl, leader, topic, 0, pc.batch)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		msg := ""
		if p.ErrorMessage != nil {
			msg = *p.ErrorMessage
		}
		var at []int32
		for _, e := range p.ErrorRecords {
			at = append(at, e.RelativeOffset)
		}
		name := "no error"
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			name = err.(*kerr.Error).Message
		}
		t.Logf("%s (%d bytes): %s, base offset %d, records at fault %v: %q", pc.name, len(pc.batch), name, p.BaseOffset, at, msg)
		if p.ErrorCode != pc.want.Code || p.BaseOffset != -1 {
			t.Errorf("%s: %v at base offset %d; want %v, refused", pc.name, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset, pc.want)
		}
	}

	grew := peakRSS(t, pid) - before
	t.Logf("broker %d's peak RSS grew by %.1f MiB over the poison batches (%.1f MiB before)", leader, float64(grew)/(1<<20), float64(before)/(1<<20))
	if grew > 64<<20 {
		t.Errorf("broker %d's peak RSS grew by %d MiB over the poison batches: the zip bomb inflated", leader, grew>>20)
	}

	good.produce(t, kafka, topic, "after", 50, "after the poison")
	hw := highWatermarks(t, kafkaClient(t, kafka), topic, 1)
	read := consumeAll(t, kafka, topic, hw)
	lost, found, unacked := checkAckedRecords(t, good.sent, good.acked, hw, read, nil)
	t.Logf("kgo read %d records up to the high watermark %d: %d acknowledged found, %d lost, %d never acknowledged", len(read[0]), hw[0], found, lost, unacked)
	values := make([]string, 0, len(read[0]))
	for _, r := range read[0] {
		values = append(values, r.value)
	}
	return kafka, topic, values
}

// TestKafka_PoisonBatchesRefused: a gzip flag over raw records, garbage
// records under a good CRC, a records count that lies, a bad CRC, a
// control batch and a zip bomb, each produced raw to the leader of an
// acks=all RF-3 partition between good records, are refused with Kafka's
// error; franz-go and `keel consume` then read the partition to its end
// and find exactly the good records, each at its acknowledged offset.
// Before batches were validated, the gzip one was acknowledged and
// stopped `keel consume` at it ("unable to decompress batch").
func TestKafka_PoisonBatchesRefused(t *testing.T) {
	t.Parallel()
	kafka, topic, want := poisonedPartition(t)
	stdout, stderr, code := runKeel(t, kafkaTimeout, "consume", "--topic", topic, "--from-beginning",
		"--max", fmt.Sprint(len(want)), "-o", "json", "--timeout", "20s", "--bootstrap", strings.Join(bootstrap(kafka), ","))
	if code != 0 {
		t.Fatalf("keel consume exited %d:\n%s", code, stderr)
	}
	var got []string
	for i, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r struct {
			Offset int64  `json:"offset"`
			Value  string `json:"value"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("keel consume printed %q: %v", line, err)
		}
		if r.Offset != int64(i) {
			t.Fatalf("keel consume: record %d at offset %d: a gap", i, r.Offset)
		}
		got = append(got, r.Value)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keel consume read %d records %v;\nwant the %d good ones %v", len(got), got, len(want), want)
	}
	t.Logf("keel consume read the %d good records to the end", len(got))
}

// TestKcat_PoisonBatchesRefused is TestKafka_PoisonBatchesRefused with
// kcat (librdkafka) as well: it produces 20 records under each of Kafka's
// codecs (librdkafka's snappy is a raw block, its lz4 and zstd frames its
// own), which must be taken, then reads the partition to its end. Before
// batches were validated, kcat stopped at the first poison batch.
func TestKcat_PoisonBatchesRefused(t *testing.T) {
	t.Parallel()
	kcat := kcatPath(t)
	kafka, topic, want := poisonedPartition(t)
	seeds := strings.Join(bootstrap(kafka), ",")
	for _, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
		var in strings.Builder
		for i := range 20 {
			v := fmt.Sprintf("p0-kcat-%s-%d", codec, i)
			want = append(want, v)
			in.WriteString(v + "\n")
		}
		mustKcat(t, kcat, in.String(), "-P", "-b", seeds, "-t", topic, "-p", "0", "-z", codec,
			"-X", "acks=all", "-X", "enable.idempotence=true")
	}
	out := mustKcat(t, kcat, "", "-C", "-b", seeds, "-t", topic, "-p", "0",
		"-o", "beginning", "-e", "-f", "%o %s\\n")
	var got []string
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		off, value, _ := strings.Cut(line, " ")
		if off != fmt.Sprint(i) {
			t.Fatalf("kcat: record %d at offset %s: a gap", i, off)
		}
		got = append(got, value)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("kcat read %d records %v;\nwant the %d good ones %v", len(got), got, len(want), want)
	}
	t.Logf("kcat read the %d good records to the end, its own 80 under gzip, snappy, lz4 and zstd among them", len(got))
}
