package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestBrokers_FencedAtItsOwnRequestRegistersAgain: a broker that asked to
// be fenced (want_fence) and keeps heartbeating so holds no valid session,
// as in Kafka (BrokerHeartbeatManager.hasValidSession is false for a fenced
// broker): its next incarnation registers at once, with a new epoch, rather
// than being refused as a duplicate until the old session ends.
func TestBrokers_FencedAtItsOwnRequestRegistersAgain(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	epoch := registerActive(t, leader, 1, incA)
	for range 2 { // fenced by the first; the second asks to stay so
		resp, err := leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: epoch,
			MetadataOffset: leader.FSM().Image().Offset, WantFence: true})
		if err != nil || !resp.IsFenced {
			t.Fatalf("heartbeat with want_fence: %+v, %v; want fenced", resp, err)
		}
	}
	resp, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incB))
	if err != nil || resp.BrokerEpoch <= epoch {
		t.Fatalf("the next incarnation of broker 1, fenced at its own request: %+v, %v; want a new epoch above %d", resp, err, epoch)
	}
}
