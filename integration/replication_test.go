package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/internal/poll"
)

// The data plane's replication with real processes: `keel broker` runs
// broker/replication, and the tests write through its test-only produce
// path (--test-produce-listen) until the Kafka listener lands.

// produceAnswer is the test produce path's JSON.
type produceAnswer struct {
	BaseOffset int64  `json:"base_offset"`
	Error      string `json:"error"`
	Message    string `json:"message"`
}

// testBatch is a v2 record batch of one record holding value, as a client
// sends it (base offset 0, good CRC-32C).
func testBatch(value string) []byte {
	r := kmsg.Record{Key: []byte("k"), Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	recs := r.AppendTo(nil)
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{Length: int32(49 + len(recs)), Magic: 2, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: recs}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// produceTo sends one batch to addr's test produce path with acks.
func produceTo(addr, topic string, acks int, batch []byte) (produceAnswer, error) {
	client := http.Client{Timeout: 15 * time.Second}
	resp, err := client.Post(fmt.Sprintf("http://%s/produce?topic=%s&partition=0&acks=%d", addr, topic, acks),
		"application/octet-stream", bytes.NewReader(batch))
	if err != nil {
		return produceAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return produceAnswer{}, fmt.Errorf("status %s", resp.Status)
	}
	var a produceAnswer
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// acked is one batch the leader acknowledged (acks=all).
type acked struct {
	offset int64
	batch  []byte
}

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
// topic with min.insync.replicas=2, acks=all writes. The leader is killed
// with kill -9 mid-stream: every acknowledged batch is on the new leader at
// the offset it was acknowledged at. The old leader comes back (reporting
// its unclean shutdown at registration), truncates where its log diverges,
// rejoins the ISR, and in the end no replica holds anything the leader
// does not: the three logs are the same, byte for byte.
func TestReplication_AckedBatchesSurviveLeaderKill(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second))
	c.WaitForActive(t, activeTimeout)
	produceAddrs := freeAddrs(t, 3)
	var opts [][]brokerOption
	for i := range threeBrokers {
		opts = append(opts, []brokerOption{withBrokerFlags("--replica-lag-time-max=1s", "--replica-fetch-interval=100ms",
			"--test-produce-listen="+produceAddrs[i])})
	}
	c.startBrokers(threeBrokers, opts)
	c.WaitForBrokers(t, allActive(threeBrokers...))
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	addrOf := func(id int32) string { return produceAddrs[slices.Index(threeBrokers, id)] }

	var acks []acked
	n := 0
	// produce writes batches to whichever broker leads until want more are
	// acknowledged, following the leader on NOT_LEADER_OR_FOLLOWER and
	// retrying NOT_ENOUGH_REPLICAS and timeouts (a batch that timed out may
	// be in the log, unacknowledged: that is allowed).
	produce := func(want int) {
		t.Helper()
		target := len(acks) + want
		poll.UntilState(t, 60*time.Second, fmt.Sprintf("%d acknowledged batches", target), func() (bool, string) {
			d, err := c.DescribeTopicE(t.Context(), topic)
			if err != nil || d.Partitions[0].Leader <= 0 {
				return false, fmt.Sprintf("no leader: %v", err)
			}
			leader := d.Partitions[0].Leader
			for len(acks) < target {
				n++
				b := testBatch(fmt.Sprintf("value-%d", n))
				a, err := produceTo(addrOf(leader), topic, -1, b)
				if err != nil {
					return false, fmt.Sprintf("broker %d: %v", leader, err)
				}
				if a.Error != "" {
					return false, fmt.Sprintf("broker %d: %s: %s", leader, a.Error, a.Message)
				}
				acks = append(acks, acked{a.BaseOffset, b})
			}
			return true, ""
		})
	}
	produce(30)
	old := d.Partitions[0].Leader
	// Kill the leader while a produce is in flight on it.
	inflight := make(chan error, 1)
	go func() {
		_, err := produceTo(addrOf(old), topic, -1, testBatch("in-flight"))
		inflight <- err
	}()
	c.KillBroker(old)
	<-inflight
	c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", old), func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != old
	})
	produce(30)

	c.RestartBroker(old)
	c.WaitForTopic(t, topic, "back to a full ISR", func(d topicJSON) bool { return len(d.Partitions[0].ISR) == 3 })
	produce(5) // committed on all three: every log reaches the same end
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
	for _, a := range acks {
		got, ok := leaderBatches[a.offset]
		if !ok || !bytes.Equal(got[21:], a.batch[21:]) {
			t.Fatalf("the batch acknowledged at offset %d is not on the leader (broker %d) at that offset", a.offset, final.Leader)
		}
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
	t.Logf("%d batches acknowledged; leader %d killed; final leader %d, log end %d", len(acks), old, final.Leader, leaderEnd)
}
