package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
	"github.com/keel-dev/keel/broker/node"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
)

// BenchmarkNode_ProducePath: the leader's whole produce path for one
// connection, acks=1 (a Produce frame read, parsed, checked by batchcheck,
// appended by the replication Manager to partlog, answered), with N records
// of 100 bytes in one batch; idempotent: from one producer id, each batch
// the next sequence (partlog's producer state). allocs/record is allocs/op
// over N: the path's allocations must not grow with the records a batch
// holds. Allocations are the whole process's (the controller's heartbeats
// included: a few per thousand ops).
//
//	go test -run '^$' -bench BenchmarkNode_ProducePath -benchmem ./broker/node/
func BenchmarkNode_ProducePath(b *testing.B) {
	conn := benchNode(b)
	for _, tc := range []struct {
		records    int
		idempotent bool
	}{{1, false}, {16, false}, {256, false}, {16, true}, {256, true}} {
		name := fmt.Sprintf("records=%d", tc.records)
		if tc.idempotent {
			name += ",idempotent"
		}
		records := tc.records
		b.Run(name, func(b *testing.B) {
			frame, size := produceFrame(records, 100)
			next := func() {}
			if tc.idempotent {
				next = idempotentFrame(frame, size, int64(1000+records))
			}
			var in []byte
			produce := func() (code int16) {
				next()
				code, in = roundTripProduce(b, conn, frame, in)
				return code
			}
			// The partition's first leader may take a moment to be elected.
			poll.Until(b, waitTimeout, "t-0 to take a produce", func() bool { return produce() == 0 })
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for b.Loop() {
				if code := produce(); code != 0 {
					b.Fatalf("produce answered error %d", code)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N)/float64(records), "allocs/record")
		})
	}
}

// benchNode starts a controller and a node serving Kafka, creates t with
// one partition (RF 1) and returns a connection to its Kafka listener;
// all of it stops when b ends.
func benchNode(b *testing.B) net.Conn {
	c := keeltest.NewCluster(b, 1, keeltest.WithLogger(slog.New(slog.DiscardHandler)))
	c.WaitForActive(waitTimeout)
	n, err := node.Start(node.Config{Agent: agentConfig(c.Addrs(), b.TempDir(), nil), KafkaListen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	poll.Until(b, waitTimeout, "the broker to be ready", func() bool { return n.Ready() == nil })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.Client().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}); err != nil {
		b.Fatal(err)
	}
	conn, err := net.Dial("tcp", n.KafkaAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkNode_FetchPath: a consumer's fetch of 1 MiB (Fetch v11, as
// librdkafka sends it) from a partition holding 8 MiB in batches of 100
// records of 1 KiB, always from the first offset: the log's read, the
// answer's encoding and its write, for the records' bytes.
//
//	go test -run '^$' -bench BenchmarkNode_FetchPath -benchmem ./broker/node/
func BenchmarkNode_FetchPath(b *testing.B) {
	conn := benchNode(b)
	pframe, size := produceFrame(100, 1024)
	var in []byte
	produced := 0
	poll.Until(b, waitTimeout, "8 MiB produced to t-0", func() bool {
		var code int16
		if code, in = roundTripProduce(b, conn, pframe, in); code == 0 {
			produced += size
		}
		return produced >= 8<<20
	})
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = 11, -1, 1<<20, 0
	req.Topics = []kmsg.FetchRequestTopic{{Topic: "t", Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1,
		FetchOffset: 0, LogStartOffset: -1, PartitionMaxBytes: 1 << 20}}}}
	f := requestFrame(req)
	in = roundTrip(b, conn, f, in)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		in = roundTrip(b, conn, f, in)
	}
	b.StopTimer()
	if len(in) < 1<<19 {
		b.Fatalf("a fetch answered %d bytes, want about 1 MiB", len(in))
	}
}

// roundTrip writes frame and reads its answer into in's space.
func roundTrip(b *testing.B, conn net.Conn, frame, in []byte) []byte {
	if _, err := conn.Write(frame); err != nil {
		b.Fatal(err)
	}
	return readAnswer(b, conn, in)
}

// roundTripProduce writes a produce's frame and reads its answer into
// in's space: the answer's error code for t-0.
func roundTripProduce(b *testing.B, conn net.Conn, frame, in []byte) (int16, []byte) {
	in = roundTrip(b, conn, frame, in)
	resp := kmsg.ProduceResponse{Version: 9}
	// Size, correlation id and the flexible header's empty tags.
	if err := resp.ReadFrom(in[9:]); err != nil {
		b.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode, in
}

// produceFrame is a Produce v9 (acks=1) of one batch to t-0 of records
// records of size bytes each, and the batch's size.
func produceFrame(records, size int) (frame []byte, batchSize int) {
	recs := make([]kmsg.Record, records)
	for i := range recs {
		recs[i] = kmsg.Record{Key: []byte("key"), Value: make([]byte, size)}
	}
	batch := batchcheck.Build(time.Now().UnixMilli(), recs)
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, 1, 5000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}}}
	return requestFrame(req), len(batch)
}

// idempotentFrame makes the batch of a produceFrame of size bytes one of
// producer pid (epoch 0, sequence 0), and returns next, which moves it
// to its next sequence in place (the CRC with it), allocating nothing.
func idempotentFrame(frame []byte, size int, pid int64) (next func()) {
	batch := frame[len(frame)-size-3 : len(frame)-3] // then the partition's, topic's and request's tags
	binary.BigEndian.PutUint64(batch[43:], uint64(pid))
	binary.BigEndian.PutUint16(batch[51:], 0)
	records := int32(binary.BigEndian.Uint32(batch[57:]))
	seq := -records
	return func() {
		seq += records
		binary.BigEndian.PutUint32(batch[53:], uint32(seq))
		binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], castagnoli))
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// requestFrame is req as a client sends it: size, header (v2, with no
// tags, for a flexible request) with client id "b", body.
func requestFrame(req kmsg.Request) []byte {
	f := make([]byte, 4, 64)
	f = binary.BigEndian.AppendUint16(f, uint16(req.Key()))
	f = binary.BigEndian.AppendUint16(f, uint16(req.GetVersion()))
	f = binary.BigEndian.AppendUint32(f, 1)
	f = binary.BigEndian.AppendUint16(f, 1)
	f = append(f, 'b')
	if req.IsFlexible() {
		f = append(f, 0)
	}
	f = req.AppendTo(f)
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f
}

// readAnswer reads one answer frame into buf's space, size included: the
// client allocates nothing once buf has grown.
func readAnswer(b *testing.B, c net.Conn, buf []byte) []byte {
	buf = slices.Grow(buf[:0], 4)[:4]
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(buf))
	buf = slices.Grow(buf, n)[:4+n]
	if _, err := io.ReadFull(c, buf[4:]); err != nil {
		b.Fatal(err)
	}
	return buf
}
