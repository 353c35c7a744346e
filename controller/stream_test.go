package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
