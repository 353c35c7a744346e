package integration

// A fetch that waits must cost its broker little, and only while its
// client is there: 20 connections that each sent one 165 KB Fetch, asking
// to wait up to 24.8 days, took a broker from 80 to 100,120 goroutines
// and from 30 to 602 MB, and it stayed there after the client closed them.

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// startFetchBroker starts one controller and broker 1 with a Kafka
// listener and a metrics endpoint, with flags, and creates topic with
// partitions on it. It returns the cluster and the Kafka listener.
func startFetchBroker(t *testing.T, topic string, partitions int32, flags ...string) (*Cluster, string) {
	t.Helper()
	c := startCluster(t, 1)
	c.WaitForActive(t, activeTimeout)
	addr := freeAddrs(t, 1)[0]
	c.startBrokers([]int32{1}, [][]brokerOption{{withBrokerMetrics(), withBrokerFlags(append([]string{"--kafka-listen=" + addr}, flags...)...)}})
	c.WaitForBrokers(t, allActive(1))
	createTopicThroughBrokers(t, map[int32]string{1: addr}, topic, partitions, 1, nil)
	return c, addr
}

// waitingFetch is a consumer's Fetch v11 frame (librdkafka's version,
// correlation id 1) of topic's partitions 0..partitions-1 from offset 0,
// each named repeats times, asking to wait maxWaitMs for a byte.
func waitingFetch(topic string, partitions int32, repeats int, maxWaitMs int32) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes, req.MinBytes, req.MaxWaitMillis = 11, -1, 1<<20, 1, maxWaitMs
	for range repeats {
		for p := range partitions {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, 1<<20, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
	}
	// Header v1: key, version, correlation id, client id "t".
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.Version))
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(binary.BigEndian.AppendUint16(b, 1), 't')
	b = req.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// brokerMetrics scrapes series of a broker's /metrics (-1: absent),
// trying again for a while if the broker is too busy to answer.
func brokerMetrics(t *testing.T, c *Cluster, id int32, names ...string) []float64 {
	t.Helper()
	var m scrape
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("broker %d's /metrics", id), func() (bool, string) {
		var err error
		m, err = scrapeMetrics(c.broker(id).MetricsAddr())
		return err == nil, fmt.Sprint(err)
	})
	out := make([]float64, len(names))
	for i, name := range names {
		out[i] = -1
		if v, ok := m[name]; ok {
			out[i] = v
		}
	}
	return out
}

func brokerMetric(t *testing.T, c *Cluster, id int32, name string) float64 {
	t.Helper()
	return brokerMetrics(t, c, id, name)[0]
}

// TestFetchWait_EndsWithConnection opens 20 connections to a broker's
// Kafka listener, each sending one Fetch of about 165 KB (8 partitions of
// a topic with no records, each named 600 times) that asks to wait 24.8
// days, with the broker's own cap at an hour: the waits cost a few
// goroutines each (not one per partition) and little memory, and once
// the client closes the connections the broker's goroutines are back to
// their baseline within a second or two (the test allows 10 s, for a
// loaded machine).
func TestFetchWait_EndsWithConnection(t *testing.T) {
	const conns, partitions, repeats = 20, 8, 600
	c, addr := startFetchBroker(t, "idle", partitions, "--kafka-fetch-max-wait=1h")
	nd := c.broker(1)
	frame := waitingFetch("idle", partitions, repeats, math.MaxInt32)
	t.Logf("each Fetch: %d bytes, %d partitions", len(frame), partitions*repeats)
	base := brokerMetric(t, c, 1, "go_goroutines")
	rssBefore := peakRSS(t, nd.Pid())
	var cs []net.Conn
	t.Cleanup(func() {
		for _, cn := range cs {
			cn.Close()
		}
	})
	for range conns {
		cn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, cn)
		if _, err := cn.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	// Every fetch waits: the broker says so, or (the bug this guards
	// against) holds a goroutine for each partition of each fetch.
	var waiting float64
	poll.UntilState(t, brokersTimeout, "every fetch to wait", func() (bool, string) {
		m := brokerMetrics(t, c, 1, "keel_kafka_fetch_waits", "go_goroutines")
		n := m[0]
		waiting = m[1]
		return n == conns || waiting >= base+conns*partitions*repeats,
			fmt.Sprintf("keel_kafka_fetch_waits %v; %v goroutines, %v before", n, waiting, base)
	})
	growth := peakRSS(t, nd.Pid()) - rssBefore
	t.Logf("%d waiting fetches: %v goroutines (%v before), peak RSS +%d MiB", conns, waiting, base, growth>>20)
	if waiting > base+4*conns {
		t.Errorf("%d waiting fetches took %v goroutines, want at most %d (a few per connection, none per partition)", conns, waiting-base, 4*conns)
	}
	// The fetches themselves, decoded, and their answers laid out: a few
	// MiB each (a goroutine per partition took 26 MiB each). A keel built
	// with the race detector touches about four times as much (its shadow
	// memory).
	bound := int64(128 << 20)
	if os.Getenv("KEEL_INTEGRATION_RACE") != "" {
		bound = 400 << 20
	}
	if growth > bound {
		t.Errorf("%d waiting fetches grew the broker's peak RSS by %d MiB, want under %d MiB", conns, growth>>20, bound>>20)
	}
	// No answer came: the waits are the broker's cap's (an hour), not the
	// client's, and neither has passed.
	for i, cn := range cs {
		_ = cn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if n, err := cn.Read(make([]byte, 1)); n > 0 || !isTimeout(err) {
			t.Fatalf("connection %d answered before its wait ended: %d bytes, %v", i, n, err)
		}
	}
	closed := time.Now()
	for _, cn := range cs {
		cn.Close()
	}
	var after float64
	poll.UntilState(t, 30*time.Second, "the broker's goroutines to come back to their baseline", func() (bool, string) {
		after = brokerMetric(t, c, 1, "go_goroutines")
		return after <= base+5, fmt.Sprintf("%v goroutines, %v before the fetches", after, base)
	})
	took := time.Since(closed)
	t.Logf("goroutines back to %v (%v before) %v after the close; peak RSS +%d MiB in all", after, base, took.Round(time.Millisecond),
		(peakRSS(t, nd.Pid())-rssBefore)>>20)
	// Only the close ends the waits before the hour's cap; the bound
	// leaves room for a loaded machine (they end in a few hundred ms).
	if took > 10*time.Second {
		t.Errorf("the waits were released %v after their connections closed, want within 10s (the cap is an hour)", took)
	}
	if n := brokerMetric(t, c, 1, "keel_kafka_fetch_waits"); n != 0 {
		t.Errorf("keel_kafka_fetch_waits = %v after the close, want 0", n)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestFetchWait_CappedByBroker: a consumer asking to wait a day for data
// that does not come is answered, empty, within the broker's cap
// (--kafka-fetch-max-wait, 500 ms by default), as Kafka's consumers wait
// by default, not a day later.
func TestFetchWait_CappedByBroker(t *testing.T) {
	_, addr := startFetchBroker(t, "quiet", 1)
	cn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	start := time.Now()
	if _, err := cn.Write(waitingFetch("quiet", 1, 1, 24*3600*1000)); err != nil {
		t.Fatal(err)
	}
	_ = cn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(cn, size[:]); err != nil {
		t.Fatalf("no answer to a fetch asking to wait a day (%v after): %v", time.Since(start), err)
	}
	took := time.Since(start)
	raw := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(cn, raw); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(11)
	if err := resp.ReadFrom(raw[4:]); err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	t.Logf("a fetch asking to wait a day answered in %v", took.Round(time.Millisecond))
	if p.ErrorCode != 0 || len(p.RecordBatches) != 0 {
		t.Errorf("answer: %v, %d bytes of records; want no error, none", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
	}
	// 500 ms, with a wide margin for a loaded machine.
	if took < 400*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered in %v, want about 500 ms (the broker's cap)", took)
	}
}
