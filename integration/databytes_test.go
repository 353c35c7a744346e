package integration

// What a broker allocates for the records it carries (issue 31): the
// request frames of produces and the buffers of consumers' reads come
// from a pool and go back once their answer is written, so that the
// bytes allocated no longer follow the bytes produced and consumed. A
// pooled frame handed back too early would let one request's records be
// overwritten by the next's: two producers on their own connections write
// distinct payloads side by side, and every record read back must be the
// one acknowledged.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// allocatedBytes is the Go heap's allocations since the broker started
// (go_memstats_alloc_bytes_total).
func allocatedBytes(t *testing.T, c *Cluster, id int32) float64 {
	t.Helper()
	s, err := scrapeMetrics(c.broker(id).MetricsAddr())
	if err != nil {
		t.Fatalf("scrape broker %d: %v", id, err)
	}
	v, ok := s["go_memstats_alloc_bytes_total"]
	if !ok {
		t.Fatalf("broker %d exports no go_memstats_alloc_bytes_total", id)
	}
	return v
}

// payload is producer p's record seq: its header names both, and the rest
// is random bytes drawn from both, so that a record overwritten by
// another's shows, and compression leaves the bytes carried as they are.
func payload(p, seq, size int) []byte {
	v := make([]byte, size)
	binary.BigEndian.PutUint32(v, uint32(p))
	binary.BigEndian.PutUint32(v[4:], uint32(seq))
	r := rand.New(rand.NewPCG(uint64(p), uint64(seq)))
	for i := 8; i+8 <= size; i += 8 {
		binary.LittleEndian.PutUint64(v[i:], r.Uint64())
	}
	return v
}

// TestDataPath_AllocatesLessThanItCarries: two producers on their own
// connections write 24 MiB each, in 8 KiB records batched up to 1 MiB, to
// one broker (RF 1), and one consumer reads all of it back. The broker
// allocates less than a third of the bytes it takes in, and less than a
// third of those it serves; every record read is the one produced, at
// most once. (Before request frames and consumers' reads were pooled, it
// allocated each produced byte once for its frame, and each consumed one
// at least twice: a read buffer, then the answer's.)
func TestDataPath_AllocatesLessThanItCarries(t *testing.T) {
	const (
		topic     = "bytes"
		producers = 2
		records   = 3072 // a producer's: 24 MiB
		size      = 8 << 10
		carried   = producers * records * size
	)
	c, addr := startFetchBroker(t, topic, 1)
	kafka := map[int32]string{1: addr}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()

	before := allocatedBytes(t, c, 1)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		cl := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(1<<20),
			kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range records {
				cl.Produce(ctx, &kgo.Record{Value: payload(p, seq, size)}, func(_ *kgo.Record, err error) {
					if err != nil {
						select {
						case errs <- fmt.Errorf("producer %d, record %d: %w", p, seq, err):
						default:
						}
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				errs <- fmt.Errorf("producer %d: flush: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	produced := allocatedBytes(t, c, 1) - before

	before = allocatedBytes(t, c, 1)
	cl := kafkaClient(t, kafka, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxPartitionBytes(1<<20))
	next := make([]int, producers)
	for read := 0; read < producers*records; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d of %d records read: %v", read, producers*records, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			read++
			p, seq := int(binary.BigEndian.Uint32(r.Value)), int(binary.BigEndian.Uint32(r.Value[4:]))
			switch {
			case p >= producers || len(r.Value) != size:
				t.Fatalf("offset %d: a record of %d bytes from producer %d: not one produced", r.Offset, len(r.Value), p)
			case seq != next[p]:
				// Each producer's records keep their order (one
				// partition, one connection, idempotent).
				t.Fatalf("offset %d: producer %d's record %d, want its %d", r.Offset, p, seq, next[p])
			case !bytes.Equal(r.Value, payload(p, seq, size)):
				t.Fatalf("offset %d: producer %d's record %d does not hold what it produced", r.Offset, p, seq)
			}
			next[p]++
		})
	}
	consumed := allocatedBytes(t, c, 1) - before

	t.Logf("broker allocated %.1f MiB producing %d MiB (%.2f a byte), %.1f MiB serving them (%.2f a byte)",
		produced/(1<<20), carried>>20, produced/carried, consumed/(1<<20), consumed/carried)
	if produced > carried/3 {
		t.Errorf("the broker allocated %.1f MiB taking in %d MiB of records: want under a third of it", produced/(1<<20), carried>>20)
	}
	if consumed > carried/3 {
		t.Errorf("the broker allocated %.1f MiB serving %d MiB of records: want under a third of it", consumed/(1<<20), carried>>20)
	}
}
