package console

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// bigImage is fixture's brokers with topics of 1,000 partitions each, n
// partitions in all, every tenth under-replicated.
func bigImage(b *testing.B, n int) *fsm.Image {
	b.Helper()
	img := fixture(b)
	for ti := 0; ti < n/1000; ti++ {
		tid := fsm.TopicID{0xf0, byte(ti >> 16), byte(ti >> 8), byte(ti)}
		recs := []*keelpb.Record{rec(&keelpb.TopicRecord{Name: fmt.Sprintf("t-%06d", ti), TopicId: bytes.Clone(tid[:])})}
		for p := range int32(1000) {
			isr := []int32{1, 2}
			if p%10 == 0 {
				isr = []int32{1}
			}
			recs = append(recs, rec(part(tid, p, 1, []int32{1, 2}, isr)))
		}
		var err error
		if img, err = fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs}); err != nil {
			b.Fatal(err)
		}
	}
	return img
}

// BenchmarkScan: what an overview costs when the image has changed since
// the last (a walk of every partition), at 100k and 1M partitions.
func BenchmarkScan(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			img := bigImage(b, n)
			b.ResetTimer()
			for b.Loop() {
				scanImage(img)
			}
		})
	}
}

// BenchmarkTopicsPage: one page of 100 topics, filtered by name, of 1,000
// topics of 1,000 partitions.
func BenchmarkTopicsPage(b *testing.B) {
	img := bigImage(b, 1_000_000)
	s := scanImage(img)
	b.ResetTimer()
	for b.Loop() {
		listTopics(img, s, topicQuery{match: "t-0005", offset: 0, limit: 100})
	}
}
