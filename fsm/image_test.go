package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// onBrokerByScan is what PartitionsOnBroker must return, found the slow way.
func onBrokerByScan(img *Image, b int32) []*Partition {
	var out []*Partition
	img.EachPartition(func(p *Partition) bool {
		if slices.Contains(p.Replicas, b) || slices.Contains(p.AddingReplicas, b) {
			out = append(out, p)
		}
		return true
	})
	return out
}

func onBroker(img *Image, b int32) []*Partition {
	var out []*Partition
	img.PartitionsOnBroker(b, func(p *Partition) bool {
		out = append(out, p)
		return true
	})
	return out
}

// checkImage checks the image's indexes against each other.
func checkImage(t *testing.T, img *Image, brokers int32) {
	t.Helper()
	total := 0
	for _, tp := range img.Topics() {
		if got, ok := img.TopicByID(tp.ID); !ok || got != tp {
			t.Fatalf("topic %q by id = %v", tp.Name, got)
		}
		parts := img.Partitions(tp.ID)
		if len(parts) != int(tp.Partitions) {
			t.Fatalf("topic %q: %d partitions, counts %d", tp.Name, len(parts), tp.Partitions)
		}
		for i, p := range parts {
			if q, _ := img.Partition(tp.ID, int32(i)); q != p || p.Partition != int32(i) || p.TopicID != tp.ID {
				t.Fatalf("partition %d of %q: %+v", i, tp.Name, p)
			}
		}
		total += len(parts)
	}
	if total != img.PartitionCount() {
		t.Fatalf("PartitionCount = %d, topics hold %d", img.PartitionCount(), total)
	}
	for b := int32(0); b < brokers; b++ {
		if got, want := onBroker(img, b), onBrokerByScan(img, b); !slices.Equal(got, want) {
			t.Fatalf("broker %d: index has %d partitions, scan %d", b, len(got), len(want))
		}
	}
}

// Random creates, leader and ISR changes, reassignments and topic deletions,
// in batches of many records (some failing): after every batch the
// indexes agree, every earlier image is unchanged, and a snapshot restores
// the same image and index.
func TestImage_RandomBatchesKeepIndexesAndHistory(t *testing.T) {
	const brokers = 6
	r := rand.New(rand.NewPCG(5, 6))
	pick := func(k int) []int32 {
		var out []int32
		for _, b := range r.Perm(brokers)[:k] {
			out = append(out, int32(b))
		}
		return out
	}
	type partitionID struct {
		topic TopicID
		index int32
	}
	img := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)))
	type held struct {
		img   *Image
		bytes []byte
	}
	var history []held
	nextTopic, failed := 1, 0
	for round := 0; round < 100; round++ {
		var recs []*keelpb.Record
		topics := img.Topics()
		// Records are drawn against img: one touch per partition and topic
		// keeps most batches valid.
		touched := map[partitionID]bool{}
		removed := map[TopicID]bool{}
		for range 1 + r.IntN(40) {
			switch op := r.IntN(10); {
			case op == 0 || len(topics) == 0:
				id := TopicID{byte(nextTopic >> 8), byte(nextTopic), 7}
				recs = append(recs, topicRec(fmt.Sprintf("t%03d", nextTopic), id, nil))
				nextTopic++
				for p := range r.IntN(60) {
					rep := pick(1 + r.IntN(3))
					recs = append(recs, partRec(id, int32(p), rep, rep, rep[0]))
				}
			case op == 1 && r.IntN(3) == 0:
				tp := topics[r.IntN(len(topics))]
				removed[tp.ID] = true
				recs = append(recs, removeTopic(tp.ID))
			case op == 2 && r.IntN(40) == 0:
				recs = append(recs, change(TopicID{0xee}, 0, leader(1), nil, nil)) // fails the batch
			default:
				tp := topics[r.IntN(len(topics))]
				cur, _ := img.Partition(tp.ID, int32(r.IntN(int(tp.Partitions)+1)))
				if cur == nil || removed[tp.ID] || touched[partitionID{tp.ID, cur.Partition}] {
					continue
				}
				touched[partitionID{tp.ID, cur.Partition}] = true
				switch rep := pick(1 + r.IntN(3)); {
				case r.IntN(3) == 0 && !slices.Equal(rep, cur.Replicas): // reassign
					recs = append(recs, change(tp.ID, cur.Partition, leader(rep[0]), rep, rep))
				case len(cur.ISR) > 1: // shrink the ISR to the leader
					recs = append(recs, change(tp.ID, cur.Partition, leader(cur.Replicas[0]), []int32{cur.Replicas[0]}, nil))
				case len(cur.Replicas) > 1: // grow it back
					recs = append(recs, change(tp.ID, cur.Partition, nil, slices.Clone(cur.Replicas), nil))
				}
			}
		}
		if len(recs) == 0 {
			continue
		}
		next, err := Apply(img, uint64(round+10), 1, batch(recs...))
		if err != nil {
			failed++
			if next != img {
				t.Fatal("a failed batch returned a new image")
			}
		}
		img = next
		checkImage(t, img, brokers)
		history = append(history, held{img, imageBytes(t, img)})
	}
	for i, h := range history {
		if !bytes.Equal(imageBytes(t, h.img), h.bytes) {
			t.Fatalf("image %d changed after later batches", i)
		}
	}
	if img.PartitionCount() == 0 || failed == 0 || failed > len(history)/4 {
		t.Fatalf("%d partitions, %d of %d batches failed", img.PartitionCount(), failed, len(history))
	}
	t.Logf("%d topics, %d partitions; %d of %d batches failed", img.TopicCount(), img.PartitionCount(), failed, len(history))
	restored, err := ReadSnapshot(bytes.NewReader(imageBytes(t, img)))
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, restored, brokers)
	if !sameImage(t, restored, img) {
		t.Fatal("snapshot round trip changed the image")
	}
	for b := int32(0); b < brokers; b++ {
		var a, c []int32
		for _, p := range onBroker(img, b) {
			a = append(a, p.Partition)
		}
		for _, p := range onBroker(restored, b) {
			c = append(c, p.Partition)
		}
		if !slices.Equal(a, c) {
			t.Fatalf("broker %d: restored index differs", b)
		}
	}
}

// A change to one partition of a batch is the only new pointer: unchanged
// partitions are the same pointers in both images (broker.DiffReplicas
// relies on it), and the ISR shares the replicas' array when they are equal.
func TestImage_UnchangedPartitionsKeepTheirPointers(t *testing.T) {
	before := withTopics(t)
	after, err := Apply(before, 100, 3, batch(change(topicA, 0, leader(2), nil, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := before.Partition(topicA, 0)
	q0, _ := after.Partition(topicA, 0)
	p1, _ := before.Partition(topicA, 1)
	q1, _ := after.Partition(topicA, 1)
	if p0 == q0 || p1 != q1 || p0.Leader != 1 || q0.Leader != 2 {
		t.Fatalf("before %+v %+v, after %+v %+v", p0, p1, q0, q1)
	}
	if &q0.ISR[0] != &q0.Replicas[0] || &p0.Replicas[0] != &q0.Replicas[0] {
		t.Fatal("equal replica sets are not shared")
	}
}

// Batches applied to one image at once, while readers walk it, share its
// nodes but never write to them (run with -race).
func TestImage_ConcurrentAppliesShareWithoutWrites(t *testing.T) {
	base := withTopics(t)
	want := imageBytes(t, base)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			img := base
			for j := range 50 {
				id := TopicID{0xc0, byte(i), byte(j)}
				var err error
				img, err = Apply(img, uint64(100+j), 3, batch(topicRec(fmt.Sprintf("g%d-%d", i, j), id, nil),
					partRec(id, 0, []int32{1, 2}, []int32{1, 2}, 1), change(topicA, 0, leader(int32(1+j%2)), []int32{1, 2}, nil)))
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				onBroker(base, 1)
				base.EachPartition(func(*Partition) bool { return true })
			}
		}()
	}
	wg.Wait()
	if !bytes.Equal(imageBytes(t, base), want) {
		t.Fatal("concurrent applies changed their base image")
	}
}
