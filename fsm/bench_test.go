package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// bigImage builds an image of n partitions (RF 3 over 100 brokers) in
// topics of 10,000, through Apply as the log would.
func bigImage(tb testing.TB, n int) *Image {
	tb.Helper()
	img := Empty()
	var err error
	if img, err = Apply(img, 1, 1, batch(clusterID("c"), featureLevel(1), epoch(1, 1))); err != nil {
		tb.Fatal(err)
	}
	for b := int32(0); b < 100; b++ {
		if img, err = Apply(img, uint64(2+b), 1, batch(register(b, "x"))); err != nil {
			tb.Fatal(err)
		}
	}
	index := uint64(200)
	for t := 0; t*10_000 < n; t++ {
		id := TopicID{byte(t >> 8), byte(t), 1}
		recs := []*keelpb.Record{topicRec(fmt.Sprintf("t%d", t), id, nil)}
		for p := 0; p < 10_000 && t*10_000+p < n; p++ {
			r := []int32{int32(p % 100), int32((p + 1) % 100), int32((p + 2) % 100)}
			recs = append(recs, partRec(id, int32(p), r, r, r[0]))
		}
		index++
		if img, err = Apply(img, index, 1, batch(recs...)); err != nil {
			tb.Fatal(err)
		}
	}
	return img
}

// BenchmarkSnapshot_Read100k: restoring an image of 100,000 partitions.
func BenchmarkSnapshot_Read100k(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, bigImage(b, 100_000)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot_Write100k: writing an image of 100,000 partitions.
func BenchmarkSnapshot_Write100k(b *testing.B) {
	img := bigImage(b, 100_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := WriteSnapshot(io_discard{}, img); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApply_CreateTopic10k: one batch creating a topic of 10,000 partitions.
func BenchmarkApply_CreateTopic10k(b *testing.B) {
	base := bigImage(b, 10_000)
	recs := []*keelpb.Record{topicRec("new", TopicID{0xff}, nil)}
	for p := 0; p < 10_000; p++ {
		r := []int32{int32(p % 100), int32((p + 1) % 100), int32((p + 2) % 100)}
		recs = append(recs, partRec(TopicID{0xff}, int32(p), r, r, r[0]))
	}
	bt := batch(recs...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Apply(base, 1_000_000, 2, bt); err != nil {
			b.Fatal(err)
		}
	}
}

type io_discard struct{}

func (io_discard) Write(p []byte) (int, error) { return len(p), nil }
