package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/broker/partlog"
)

// The data plane's replication with real processes: `keel broker` runs
// broker/replication, written to through its Kafka listener by franz-go.

// readLog opens a stopped broker's replica log and returns its batches by
// base offset, in order, and its log end.
func readLog(t *testing.T, dataDir string) (bases []int64, batches map[int64][]byte, leo int64) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dataDir, "logs", "*-0"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("replica logs in %s: %v, %v", dataDir, dirs, err)
	}
	l, err := partlog.Open(dirs[0], partlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	batches = map[int64][]byte{}
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		res, err := l.Read(off, math.MaxInt32)
		if err != nil {
			t.Fatal(err)
		}
		for b := res.Records; len(b) >= 61; {
			size := 12 + int(binary.BigEndian.Uint32(b[8:]))
			base := int64(binary.BigEndian.Uint64(b))
			bases = append(bases, base)
			batches[base] = bytes.Clone(b[:size])
			off = base + int64(binary.BigEndian.Uint32(b[23:])) + 1
			b = b[size:]
		}
	}
	return bases, batches, l.LogEndOffset()
}

// TestReplication_AckedBatchesSurviveLeaderKill: three brokers, an RF-3
// topic with min.insync.replicas=2, an idempotent acks=all franz-go
// producer writing all the time through the Kafka listeners, so that
// batches are in flight on the leader when it is killed with kill -9.
// Every acknowledged record is read back from the new leader at the offset
// it was acknowledged at. The old leader comes back (reporting its unclean
// shutdown at registration), truncates where its log diverges, rejoins the
// ISR, and in the end no replica holds anything the leader does not: the
// three logs on disk are the same, byte for byte, and every broker stopped
// with SIGTERM leaves its clean shutdown marker.
func TestReplication_AckedBatchesSurviveLeaderKill(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})

	prod := startProducer(t, kafka, topic, 1, "")
	prod.waitAcked(100, "before the kill")
	old := d.Partitions[0].Leader
	c.KillBroker(old) // the producer has batches in flight on it
	c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", old), func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != old
	})
	prod.waitAcked(100, fmt.Sprintf("with broker %d killed", old))
	c.RestartBroker(old)
	c.WaitForTopic(t, topic, "back to a full ISR", func(d topicJSON) bool { return len(d.Partitions[0].ISR) == 3 })
	prod.waitAcked(50, fmt.Sprintf("with broker %d back in the ISR", old)) // committed on all three
	if !prod.stop(kafkaTimeout) {
		t.Fatalf("the producer did not finish: records still in flight after %s", kafkaTimeout)
	}
	sent, acked, failed := prod.results()
	for v, err := range failed {
		t.Errorf("%q: the producer gave up: %v", v, err)
	}
	reader := kafkaClient(t, kafka)
	hw := highWatermarks(t, reader, topic, 1)
	read := consumeAll(t, kafka, topic, hw)
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, read, nil)
	final := c.cliDescribe(t, topic).Partitions[0]
	if log, err := os.ReadFile(c.broker(old).LogPath()); err != nil || !strings.Contains(string(log), "previous_broker_epoch=-1") {
		t.Errorf("broker %d, killed, did not report an unclean shutdown at its next registration (%v)", old, err)
	}

	for _, id := range threeBrokers {
		c.StopBroker(id)
		if _, err := os.Stat(filepath.Join(c.BrokerDataDir(id), "clean-shutdown")); err != nil {
			t.Errorf("broker %d stopped with SIGTERM left no clean shutdown marker: %v", id, err)
		}
	}
	leaderBases, leaderBatches, leaderEnd := readLog(t, c.BrokerDataDir(final.Leader))
	if leaderEnd != hw[0] {
		t.Errorf("the leader's log (broker %d) ends at %d, the high watermark read was %d", final.Leader, leaderEnd, hw[0])
	}
	for _, id := range threeBrokers {
		bases, batches, end := readLog(t, c.BrokerDataDir(id))
		if end != leaderEnd || !slices.Equal(bases, leaderBases) {
			t.Fatalf("broker %d log ends at %d with batches at %v; leader %d ends at %d with %v", id, end, bases, final.Leader, leaderEnd, leaderBases)
		}
		for _, base := range bases {
			if !bytes.Equal(batches[base], leaderBatches[base]) {
				t.Fatalf("broker %d batch at %d differs from the leader's", id, base)
			}
		}
	}
	t.Logf("%d records sent, %d acknowledged (%d found, %d lost), %d never acknowledged; leader %d killed; final leader %d, log end %d",
		len(sent), len(acked), found, lost, unacked, old, final.Leader, leaderEnd)
}
