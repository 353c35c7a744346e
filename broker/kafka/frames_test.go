package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestServer_PooledFramesKeepRecords: produce frames and fetch answers go
// back to a pool once answered; two producers on their own connections
// write distinct 4 KiB records side by side, and every record read back is
// one that was produced, whole, exactly once. A frame given back while
// its records were still used would show as another request's bytes.
func TestServer_PooledFramesKeepRecords(t *testing.T) {
	const producers, records, size = 2, 300, 4 << 10
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("pooled", []int32{1})
	value := func(p, seq int) []byte {
		v := bytes.Repeat(fmt.Appendf(nil, "%d/%d;", p, seq), size)[:size]
		binary.BigEndian.PutUint32(v, uint32(p))
		binary.BigEndian.PutUint32(v[4:], uint32(seq))
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		cl := newClient(t, []string{s.Addr()}, kgo.DefaultProduceTopic("pooled"), kgo.ProducerLinger(0),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range records {
				cl.Produce(ctx, &kgo.Record{Value: value(p, seq)}, func(_ *kgo.Record, err error) {
					if err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("produce: %v", err)
	}
	seen := map[[2]int]bool{}
	for _, r := range consumeN(t, []string{s.Addr()}, "pooled", producers*records) {
		k := [2]int{int(binary.BigEndian.Uint32(r.Value)), int(binary.BigEndian.Uint32(r.Value[4:]))}
		switch {
		case k[0] >= producers || k[1] >= records || !bytes.Equal(r.Value, value(k[0], k[1])):
			t.Fatalf("offset %d: %d bytes that no producer wrote (%q...)", r.Offset, len(r.Value), r.Value[:min(len(r.Value), 32)])
		case seen[k]:
			t.Fatalf("offset %d: producer %d's record %d a second time", r.Offset, k[0], k[1])
		}
		seen[k] = true
	}
}

// TestAnswerSize: a fetch answer's buffer holds its records and the
// fields around them, so that encoding it never grows the buffer.
func TestAnswerSize(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int
		records    int
		version    int16
	}{
		{"empty", 0, 0, 12},
		{"one partition, no records", 1, 0, 12},
		{"one partition, 1 MiB", 1, 1 << 20, 11},
		{"100 partitions of 10 KiB, flexible", 100, 10 << 10, 12},
		{"1000 partitions of nothing, v4", 1000, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := kmsg.NewPtrFetchResponse()
			resp.Version = tc.version
			topic := kmsg.NewFetchResponseTopic()
			topic.Topic = "a-topic-name-of-some-length"
			for i := range tc.partitions {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.RecordBatches = int32(i), make([]byte, tc.records)
				topic.Partitions = append(topic.Partitions, p)
			}
			resp.Topics = append(resp.Topics, topic)
			if got, want := len(resp.AppendTo(make([]byte, 9))), answerSize(resp); got > want {
				t.Fatalf("the answer encodes to %d bytes, answerSize says %d", got, want)
			}
		})
	}
}
