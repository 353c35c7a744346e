package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestStream_FirstPushAtOnceWithNothingNew: a broker that resumes its
// stream at the controller's own offset gets a first push at once, with no
// entries and this controller's epoch (the sign that its stream was taken),
// and then only real batches.
func TestStream_FirstPushAtOnceWithNothingNew(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	// The first look may race a write of the takeover's (the controllers'
	// registrations): look again, from the new offset, until nothing new
	// came in between.
	var (
		from   uint64
		pushes <-chan *keelpb.MetadataPush
		done   <-chan error
		cancel context.CancelFunc
	)
	_, ctrlEpoch := leader.Controller().Active()
	for try := 0; ; try++ {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		from = leader.FSM().Image().Offset
		pushes, done = collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch, FromOffset: from})
		p := nextPush(t, pushes)
		if p.GetEntries() == nil || p.ControllerEpoch != ctrlEpoch || p.ControllerId != leader.ID() {
			t.Fatalf("first push of a resumed stream = %v, want entries from controller %d at epoch %d", p, leader.ID(), ctrlEpoch)
		}
		if len(p.GetEntries().GetEntries()) == 0 {
			break
		}
		cancel()
		<-done
		if try == 5 {
			t.Fatalf("the stream always had entries to send at once; the last: %v", p)
		}
	}
	defer cancel()
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatal(err)
	}
	p := nextPush(t, pushes)
	if e := p.GetEntries().GetEntries(); len(e) != 1 || e[0].PrevOffset != from || e[0].Offset != index {
		t.Fatalf("next push = %v, want entry %d after %d", p, index, from)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v", err)
	}
}

// TestStream_BrokersAtOnePositionShareAnEncoding: three brokers at the
// head receive each new batch in one push encoded once; a broker resuming
// from an older offset gets exactly the entries after it, and a new one a
// snapshot, then the tail.
func TestStream_BrokersAtOnePositionShareAnEncoding(t *testing.T) {
	c := newCluster(t, 3, withMetrics())
	leader := c.WaitForActive(5 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []<-chan *keelpb.MetadataPush
	// received is, per stream, the offset of the last entry it got.
	var received []uint64
	for id := int32(1); id <= 3; id++ {
		epoch := registerActive(t, leader, id, incA)
		from := leader.FSM().Image().Offset
		pushes, _ := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: id, BrokerEpoch: epoch, FromOffset: from})
		streams, received = append(streams, pushes), append(received, from)
	}
	drainTo := func(offset uint64) {
		t.Helper()
		for i, pushes := range streams {
			for received[i] < offset {
				if e := nextPush(t, pushes).GetEntries().GetEntries(); len(e) > 0 {
					received[i] = e[len(e)-1].Offset
				}
			}
		}
	}
	// Each stream's first push (empty when nothing is new) is sent once it
	// starts, maybe after the count below begins: take it first.
	for i, pushes := range streams {
		if e := nextPush(t, pushes).GetEntries().GetEntries(); len(e) > 0 {
			received[i] = e[len(e)-1].Offset
		}
	}
	drainTo(leader.FSM().Image().Offset)
	old := leader.FSM().Image().Offset
	before := scrape(t, c.Metrics(leader.ID()))
	const batches = 10
	var index uint64
	for range batches {
		var err error
		if index, err = leader.Controller().Propose(context.Background(), noOp()); err != nil {
			t.Fatal(err)
		}
		drainTo(index)
	}
	after := scrape(t, c.Metrics(leader.ID()))
	encodes := after[controller.MetricPushEncodes] - before[controller.MetricPushEncodes]
	sent := after[controller.MetricPushesSent] - before[controller.MetricPushesSent]
	if encodes != batches || sent != 3*batches {
		t.Fatalf("%v pushes sent from %v encodings, want %d from %d", sent, encodes, 3*batches, batches)
	}

	// Another position: a broker that stopped at old.
	epoch4 := registerActive(t, leader, 4, incA)
	behind, _ := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 4, BrokerEpoch: epoch4, FromOffset: old})
	e := nextPush(t, behind).GetEntries().GetEntries()
	if len(e) == 0 || e[0].PrevOffset != old {
		t.Fatalf("a stream from %d first got %v", old, e)
	}
	for i := 1; i < len(e); i++ {
		if e[i].PrevOffset != e[i-1].Offset {
			t.Fatalf("entry %d follows %d, not the entry before it, %d", e[i].Offset, e[i].PrevOffset, e[i-1].Offset)
		}
	}
	if last := e[len(e)-1].Offset; last < index {
		t.Fatalf("a stream from %d got entries up to %d only, want %d", old, last, index)
	}
	// And a new broker: a snapshot of the image, marked last.
	epoch5 := registerActive(t, leader, 5, incA)
	fresh, _ := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 5, BrokerEpoch: epoch5})
	for p := nextPush(t, fresh); ; p = nextPush(t, fresh) {
		s := p.GetSnapshot()
		if s == nil {
			t.Fatalf("a new broker got %v before the end of its snapshot", p)
		}
		if s.Last {
			break
		}
	}
}
