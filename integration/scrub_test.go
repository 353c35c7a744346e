package integration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
)

// Damage that still parses (issue 27, item 7): a flipped bit in a sealed
// segment, which a broker's Open does not read for (it reads sealed
// segments' headers only). The background scrub, keel broker scrub and a
// follower's CRC check of what it fetches find it.

// scrubbedLogJSON is one row of `keel broker scrub -o json`.
type scrubbedLogJSON struct {
	Topic          string `json:"topic"`
	Partition      int32  `json:"partition"`
	Role           string `json:"role"`
	Segments       int32  `json:"segments"`
	Bytes          int64  `json:"bytes"`
	Damage         string `json:"damage"`
	DamageOffset   int64  `json:"damage_offset"`
	Repaired       bool   `json:"repaired"`
	LeaderDamage   string `json:"leader_damage"`
	LogStartOffset int64  `json:"log_start_offset"`
	LogEndOffset   int64  `json:"log_end_offset"`
}

// cliScrub runs `keel broker scrub --address ... -o json` on broker id and
// returns its row for partition 0 of topic (ok false if it has none yet).
func (c *Cluster) cliScrub(t testing.TB, id int32, topic string) (scrubbedLogJSON, bool) {
	t.Helper()
	args := append([]string{"broker", "scrub", "--address", c.BrokerAddr(id), "-o", "json"}, c.opts.tlsFlags("admin")...)
	stdout, stderr, code := runKeel(t, time.Minute, args...)
	if code != 0 {
		t.Fatalf("keel broker scrub (broker %d): exit %d: %s", id, code, stderr)
	}
	var rows []scrubbedLogJSON
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("keel broker scrub (broker %d): bad JSON: %v\n%s", id, err, stdout)
	}
	for _, r := range rows {
		if r.Topic == topic && r.Partition == 0 {
			return r, true
		}
	}
	return scrubbedLogJSON{}, false
}

// scrubValue is the value of record i: 1 KiB, so that a few thousand fill
// more than one 1 MiB segment (segment.bytes' smallest).
func scrubValue(i int) string {
	return fmt.Sprintf("%06d-%s", i, strings.Repeat("x", 1017))
}

// produceAcked produces n records with an idempotent acks=all producer
// (franz-go's defaults) in uncompressed batches of about 16 KiB (the
// segments' size is the records'), and returns each
// acknowledged record's value by offset.
func produceAcked(t *testing.T, kafka map[int32]string, topic string, n int) map[int64]string {
	t.Helper()
	cl := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(16<<10),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(scrubValue(i))}
	}
	acked := map[int64]string{}
	for _, r := range cl.ProduceSync(ctx, recs...) {
		if r.Err != nil {
			t.Fatalf("produce: %v", r.Err)
		}
		acked[r.Record.Offset] = string(r.Record.Value)
	}
	return acked
}

// segmentBatch is one batch of a segment file: its position, size and base
// offset.
type segmentBatch struct {
	pos, size, base int64
}

// partitionLogDir is broker id's log of partition 0 (there is one topic).
func (c *Cluster) partitionLogDir(t *testing.T, id int32) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(c.BrokerDataDir(id), "logs", "*-0"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("broker %d's replica logs: %v, %v", id, dirs, err)
	}
	return dirs[0]
}

// segmentBatches lists the batches of a segment file by their headers.
func segmentBatches(t *testing.T, path string) []segmentBatch {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []segmentBatch
	for pos := int64(0); pos+61 <= int64(len(b)); {
		size := 12 + int64(binary.BigEndian.Uint32(b[pos+8:]))
		out = append(out, segmentBatch{pos: pos, size: size, base: int64(binary.BigEndian.Uint64(b[pos:]))})
		pos += size
	}
	return out
}

// flipRecordBit flips one bit in the records of the middle batch of the
// first segment of the log in dir, inside its CRC and past its header,
// and returns that batch.
func flipRecordBit(t *testing.T, dir string) segmentBatch {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("%020d.log", 0))
	bs := segmentBatches(t, path)
	if len(bs) < 3 {
		t.Fatalf("%s holds %d batches; want a few", path, len(bs))
	}
	victim := bs[len(bs)/2]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := victim.pos + 61 + (victim.size-61)/2
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped a bit at position %d of %s, in the batch at offset %d (position %d, %d bytes)", at, path, victim.base, victim.pos, victim.size)
	return victim
}

// startScrubCluster starts three controllers and brokers 1, 2, 3 with
// Kafka listeners, the data plane's short test timings, metrics and a fast
// background scrub; broker 3 dials broker 1 through link, a proxy the test
// may cut, so that broker 3 cannot fetch from broker 1 as leader.
func startScrubCluster(t *testing.T) (c *Cluster, kafka map[int32]string, link *faultproxy.Proxy) {
	t.Helper()
	c = startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second))
	c.WaitForActive(t, activeTimeout)
	addrs := freeAddrs(t, 3)
	kafka = map[int32]string{1: addrs[0], 2: addrs[1], 3: addrs[2]}
	opts := func(id int32, extra ...string) []brokerOption {
		return []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerMetrics(), withBrokerFlags(append([]string{"--kafka-listen=" + kafka[id],
			"--replica-lag-time-max=1s", "--replica-fetch-interval=100ms", "--log-scrub-rate=104857600"}, extra...)...)}
	}
	c.startBrokers([]int32{1, 2}, [][]brokerOption{opts(1), opts(2)})
	link, err := faultproxy.New("broker-3-to-broker-1", c.BrokerAddr(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	c.StartBroker(3, opts(3, "--test-dial-via="+c.BrokerAddr(1)+"="+link.Addr())...)
	c.WaitForBrokers(t, allActive(1, 2, 3))
	return c, kafka, link
}

// damageCount is broker id's keel_broker_log_damage_total{found}.
func (c *Cluster) damageCount(id int32, found string) (float64, error) {
	s, err := scrapeMetrics(c.broker(id).MetricsAddr())
	if err != nil {
		return 0, err
	}
	return s[fmt.Sprintf(`keel_broker_log_damage_total{found=%q}`, found)], nil
}

// fillSegments writes n records to a fresh topic on brokers 1, 3, 2
// (broker 1 leading) with 1 MiB segments, and waits until every replica
// has them and the leader's log has rolled.
func fillSegments(t *testing.T, c *Cluster, kafka map[int32]string, topic string, n int) map[int64]string {
	t.Helper()
	c.createTopic(t, topic, "--assignment", "0:1,3,2", "--config", "min.insync.replicas=2", "--config", "segment.bytes=1048576")
	c.WaitForTopic(t, topic, "led by broker 1 with a full ISR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && len(p.ISR) == 3
	})
	acked := produceAcked(t, kafka, topic, n)
	end := int64(len(acked))
	poll.UntilState(t, kafkaTimeout, "every replica at the log end, in more than one segment", func() (bool, string) {
		var b strings.Builder
		done := true
		for _, id := range []int32{1, 2, 3} {
			r, ok := c.cliScrub(t, id, topic)
			fmt.Fprintf(&b, "broker %d: %+v; ", id, r)
			done = done && ok && r.LogEndOffset == end && r.Segments >= 1 && r.Damage == ""
		}
		return done, b.String()
	})
	return acked
}

// TestScrub_FollowerRepairsFlippedBit: a bit flipped in a sealed segment of
// a follower (broker 3, killed, its file edited, started again) still
// parses, so the broker opens the log. The scrub finds it (keel broker
// scrub and the damage metric say so), and the follower cuts its log where
// the good log ends. While its link to the leader is cut it cannot fetch
// the rest, and topic describe shows it out of the ISR; once the link is
// back it fetches from the leader, rejoins the ISR, and scrubs clean. Then
// it leads (broker 1 stops), and a consumer reads every acknowledged
// record intact from it. Before the scrub, broker 3 rejoined the ISR with
// the flipped bit and, leading, served a batch with a bad CRC.
func TestScrub_FollowerRepairsFlippedBit(t *testing.T) {
	t.Parallel()
	c, kafka, link := startScrubCluster(t)
	const topic = "scrub-follower"
	acked := fillSegments(t, c, kafka, topic, 3000)
	hw := int64(len(acked))

	c.KillBroker(3)
	victim := flipRecordBit(t, c.partitionLogDir(t, 3))
	c.WaitForTopic(t, topic, "ISR [1 2] (broker 3 killed)", func(d topicJSON) bool {
		return sameSet(d.Partitions[0].ISR, []int32{1, 2})
	})
	link.Set(faultproxy.Drop)
	c.RestartBroker(3)
	c.WaitForBrokers(t, allActive(1, 2, 3))

	var found scrubbedLogJSON
	poll.UntilState(t, kafkaTimeout, "broker 3's scrub finds the flipped bit and cuts its log there", func() (bool, string) {
		r, ok := c.cliScrub(t, 3, topic)
		found = r
		return ok && r.Damage != "" && r.Repaired, fmt.Sprintf("%+v", r)
	})
	if found.DamageOffset != victim.base || found.LogEndOffset != victim.base || !strings.Contains(found.Damage, "CRC-32C") {
		t.Errorf("broker 3's scrub: %+v; want the CRC-32C damage of the batch at offset %d, the log cut there", found, victim.base)
	}
	if n, err := c.damageCount(3, "scrub"); err != nil || n < 1 {
		t.Errorf("broker 3's keel_broker_log_damage_total{found=\"scrub\"} = %v (%v), want at least 1", n, err)
	}
	if d := c.cliDescribe(t, topic).partition(t, 0); d.Leader != 1 || !sameSet(d.ISR, []int32{1, 2}) {
		t.Errorf("with broker 3's log cut and its link to the leader cut: %s; want led by 1, ISR [1 2]", d)
	}

	link.Set(faultproxy.Up)
	c.WaitForTopic(t, topic, "broker 3 back in the ISR, fetched from the leader", func(d topicJSON) bool {
		return sameSet(d.Partitions[0].ISR, []int32{1, 2, 3})
	})
	poll.UntilState(t, kafkaTimeout, "broker 3 scrubs clean at the log end", func() (bool, string) {
		r, ok := c.cliScrub(t, 3, topic)
		return ok && r.Damage == "" && r.LogEndOffset == hw, fmt.Sprintf("%+v", r)
	})

	c.StopBroker(1)
	c.WaitForTopic(t, topic, "led by broker 3", func(d topicJSON) bool { return d.Partitions[0].Leader == 3 })
	read := consumeAll(t, kafka, topic, map[int32]int64{0: hw})
	bad := 0
	for _, r := range read[0] {
		if want, ok := acked[r.offset]; !ok || r.value != want {
			bad++
		}
	}
	if len(read[0]) != len(acked) || bad > 0 {
		t.Errorf("read %d records from broker 3 leading, %d of them not as acknowledged; %d acknowledged", len(read[0]), bad, len(acked))
	}
	t.Logf("broker 3 cut its log at %d (flipped batch %d), fetched it again, and served %d acknowledged records intact", found.LogEndOffset, victim.base, len(read[0]))
}

// TestScrub_FollowerRefusesLeadersFlippedBit: a bit flipped in the
// leader's sealed segment, under the running leader. Broker 3, its log
// deleted, fetches the partition again from the start: it refuses the
// damaged batch (the damage metric, keel broker scrub's leader damage),
// appends everything before it and nothing from it on, stays out of the
// ISR, and the leader's own scrub reports the damage in its log; a
// consumer's fetch at the damaged batch is KAFKA_STORAGE_ERROR. Before,
// the follower's refusal was a fetch error among others, logged once as
// one, it appended nothing of the answer that held the damaged batch, and
// the leader served the damaged batch to consumers.
func TestScrub_FollowerRefusesLeadersFlippedBit(t *testing.T) {
	t.Parallel()
	c, kafka, _ := startScrubCluster(t)
	const topic = "scrub-leader"
	fillSegments(t, c, kafka, topic, 3000)

	c.KillBroker(3)
	if err := os.RemoveAll(c.partitionLogDir(t, 3)); err != nil {
		t.Fatal(err)
	}
	victim := flipRecordBit(t, c.partitionLogDir(t, 1))
	c.RestartBroker(3)

	poll.UntilState(t, kafkaTimeout, "broker 3 refuses the leader's damaged batch", func() (bool, string) {
		n, err := c.damageCount(3, "fetch")
		r, _ := c.cliScrub(t, 3, topic)
		return err == nil && n >= 1 && strings.Contains(r.LeaderDamage, "CRC-32C"), fmt.Sprintf("damage{found=fetch} %v (%v); %+v", n, err, r)
	})
	// It appended everything before the damaged batch, nothing from it on.
	if r, _ := c.cliScrub(t, 3, topic); r.LogEndOffset != victim.base {
		t.Errorf("broker 3's log ends at %d after refusing the leader's damaged batch; want %d, where it starts", r.LogEndOffset, victim.base)
	}
	if d := c.cliDescribe(t, topic).partition(t, 0); sameSet(d.ISR, []int32{1, 2, 3}) {
		t.Errorf("broker 3 back in the ISR without the damaged batch: %s", d)
	}
	r, ok := c.cliScrub(t, 1, topic)
	if !ok || r.Role != "leader" || r.DamageOffset != victim.base || !strings.Contains(r.Damage, "CRC-32C") {
		t.Errorf("the leader's scrub: %+v; want its CRC-32C damage at offset %d", r, victim.base)
	}
	if n, err := c.damageCount(1, "scrub"); err != nil || n < 1 {
		t.Errorf("broker 1's keel_broker_log_damage_total{found=\"scrub\"} = %v (%v), want at least 1", n, err)
	}
	// A consumer is never served the damaged batch: the leader answers
	// KAFKA_STORAGE_ERROR there.
	if code := fetchErrorAt(t, kafka, topic, 1, victim.base); code != kerr.KafkaStorageError.Code {
		t.Errorf("a consumer's fetch at the damaged batch (offset %d) from the leader: error code %d, want KAFKA_STORAGE_ERROR (%d)", victim.base, code, kerr.KafkaStorageError.Code)
	}
	if log, err := os.ReadFile(c.broker(3).LogPath()); err != nil || !strings.Contains(string(log), "refused the leader's batches") {
		t.Errorf("broker 3 did not log its refusal (%v)", err)
	}
	// Still there after the checks above, seconds of fetches later.
	if r, _ := c.cliScrub(t, 3, topic); r.LogEndOffset != victim.base {
		t.Errorf("broker 3's log ends at %d, seconds after its refusal; want %d", r.LogEndOffset, victim.base)
	}
}

// fetchErrorAt sends broker id's Kafka listener one consumer Fetch (v11) of
// partition 0 of topic at offset and returns the partition's error code.
func fetchErrorAt(t *testing.T, kafka map[int32]string, topic string, id int32, offset int64) int16 {
	t.Helper()
	cl := kafkaClient(t, kafka)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes = 11, -1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, offset, 1<<20, -1, -1
	rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
	if err != nil {
		t.Fatalf("fetch at %d from broker %d: %v", offset, id, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch at %d from broker %d: %d topics in the answer", offset, id, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}
