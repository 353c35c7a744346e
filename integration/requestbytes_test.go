package integration

// A Kafka client's request frames must not cost a broker memory beyond a
// bound: one 100 MiB Fetch frame took a broker from 2.0 to 4.2 GB, and an
// 8 MiB one added 262 MB (decoding a request other than a produce costs
// many times its size). Item 2 of issue 27.

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchTopicEntry is one topic of a Fetch v12 request: an empty name and
// one partition, 36 bytes that decode into a topic, a partition and their
// answers, hundreds of bytes.
var fetchTopicEntry = []byte{
	0x01,       // topic: compact string, empty
	0x02,       // partitions: compact array of 1
	0, 0, 0, 0, // partition
	0xff, 0xff, 0xff, 0xff, // current_leader_epoch -1
	0, 0, 0, 0, 0, 0, 0, 0, // fetch_offset
	0xff, 0xff, 0xff, 0xff, // last_fetched_epoch -1
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // log_start_offset -1
	0, 0x10, 0, 0, // partition_max_bytes 1 MiB
	0, // partition tags
	0, // topic tags
}

// hostileFetchFrame is a Fetch v12 request frame of at most size bytes
// (its 4-byte length included) holding as many fetchTopicEntry as fit:
// a request that parses, and costs the most once decoded and answered.
func hostileFetchFrame(size int) []byte {
	head := []byte{0, 1, 0, 12, 0, 0, 0, 7, 0, 1, 't', 0}  // key 1, v12, correlation 7, client "t", no tags
	body := binary.BigEndian.AppendUint32(nil, 0xffffffff) // replica_id -1
	body = binary.BigEndian.AppendUint32(body, 0)          // max_wait_ms
	body = binary.BigEndian.AppendUint32(body, 0)          // min_bytes
	body = binary.BigEndian.AppendUint32(body, 0x7fffffff) // max_bytes
	body = append(body, 0)                                 // isolation_level
	body = binary.BigEndian.AppendUint32(body, 0)          // session_id
	body = binary.BigEndian.AppendUint32(body, 0xffffffff) // session_epoch -1
	const tail = 3                                         // forgotten topics, rack, tags
	n := (size - 4 - len(head) - len(body) - binary.MaxVarintLen32 - tail) / len(fetchTopicEntry)
	body = binary.AppendUvarint(body, uint64(n+1))
	f := make([]byte, 4, size)
	f = append(append(f, head...), body...)
	for range n {
		f = append(f, fetchTopicEntry...)
	}
	f = append(f, 0x01, 0x01, 0x00) // no forgotten topics, rack "", no tags
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f
}

// TestKafka_HostileFetchFramesBoundBrokerMemory: one 100 MiB Fetch frame,
// and sixteen 8 MiB ones on as many connections, sent to the leader of a
// partition an acks=all producer writes to, grow the broker's peak
// resident memory by less than maxGrowth (each is refused before its body
// is read), then 48 concurrent Fetch frames just within the limit by less
// than budgetBound (the request budget lets a few through at a time), and
// the producer's records are still acknowledged. Fails on c5b5b6e, where
// the broker read, decoded and answered every frame (+2.8 GiB).
func TestKafka_HostileFetchFramesBoundBrokerMemory(t *testing.T) {
	t.Parallel()
	// A sanity check of the hostile frame: it parses as a Fetch v12.
	small := hostileFetchFrame(1 << 10)
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	if err := req.ReadFrom(small[4+12:]); err != nil || len(req.Topics) == 0 {
		t.Fatalf("the hostile frame does not parse: %v (%d topics)", err, len(req.Topics))
	}

	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "bytes"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	leader := d.Partitions[0].Leader
	pid := c.broker(leader).Pid()
	p := startProducer(t, kafka, topic, 1, "a")
	p.waitAcked(100, "records before the frames")

	// The memory a hostile client may add to the broker's peak: the
	// listener reads only a refused frame's size and key, into 64 KiB of
	// read buffer per connection; the rest is the producer's own use, and
	// the runtime's. A keel built with the race detector touches about
	// three times as much (its shadow memory).
	maxGrowth := int64(96 << 20)
	if os.Getenv("KEEL_INTEGRATION_RACE") != "" {
		maxGrowth = 300 << 20
	}
	before := peakRSS(t, pid)
	var wg sync.WaitGroup
	var answered atomic.Int64
	send := func(f []byte) {
		defer wg.Done()
		conn, err := net.DialTimeout("tcp", kafka[leader], 5*time.Second)
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(kafkaTimeout))
		// The broker may close the connection before the frame is all
		// sent: what matters is what it holds meanwhile.
		if _, err := conn.Write(f); err != nil {
			return
		}
		if n, _ := io.Copy(io.Discard, conn); n > 0 {
			answered.Add(1)
		}
	}
	big := hostileFetchFrame(100 << 20)
	medium := hostileFetchFrame(8 << 20)
	wg.Add(1)
	go send(big)
	for range 4 {
		for range 4 {
			wg.Add(1)
			go send(medium)
		}
	}
	wg.Wait()
	peak := peakRSS(t, pid)
	growth := peak - before
	t.Logf("broker %d: peak resident memory %d MiB before the frames, %d MiB after: grew %d MiB (bound %d MiB); %d of 17 frames answered",
		leader, before>>20, peak>>20, growth>>20, maxGrowth>>20, answered.Load())
	if growth > maxGrowth {
		t.Errorf("one 100 MiB and sixteen 8 MiB Fetch frames grew broker %d by %d MiB; at most %d MiB", leader, growth>>20, maxGrowth>>20)
	}
	if n := answered.Load(); n > 0 {
		t.Errorf("%d hostile frames were answered; want each refused before it is read", n)
	}
	// The broker still serves: records are acknowledged after the frames.
	p.waitAcked(100, "records after the frames")

	// Frames within the limit, 48 at once on as many connections: each is
	// read, decoded and answered, but only as many at a time as the
	// broker's budget holds (--kafka-queued-max-request-bytes, 256 MiB,
	// each counted at 32 times its size: 8 at a time), the others waiting
	// unread. Unbounded, they took 1.3 GB.
	budgetBound := int64(320 << 20)
	if os.Getenv("KEEL_INTEGRATION_RACE") != "" {
		budgetBound = 900 << 20
	}
	before = peakRSS(t, pid)
	answered.Store(0)
	within := hostileFetchFrame(1<<20 - 64)
	for range 48 {
		wg.Add(1)
		go send(within)
	}
	wg.Wait()
	peak = peakRSS(t, pid)
	t.Logf("broker %d: peak resident memory %d MiB before 48 concurrent %d-byte Fetch frames, %d MiB after: grew %d MiB (bound %d MiB); %d answered",
		leader, before>>20, len(within), peak>>20, (peak-before)>>20, budgetBound>>20, answered.Load())
	if peak-before > budgetBound {
		t.Errorf("48 concurrent 1 MiB Fetch frames grew broker %d by %d MiB; at most %d MiB", leader, (peak-before)>>20, budgetBound>>20)
	}
	if n := answered.Load(); n != 48 {
		t.Errorf("%d of 48 Fetch frames within the limit were answered; want all", n)
	}
	p.waitAcked(100, "records after the frames within the limit")
}
