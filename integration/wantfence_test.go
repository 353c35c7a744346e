package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestBroker_FencedAtItsOwnRequestRegistersAgain: a broker (here the
// test's client, as a broker built on the library sends it) that asked to be
// fenced with want_fence, and keeps heartbeating so, holds no valid session
// (Kafka's BrokerHeartbeatManager.hasValidSession is false for a fenced
// broker): its next incarnation registers at once, with a new epoch, and
// is not refused DUPLICATE_BROKER_REGISTRATION until the old session ends.
func TestBroker_FencedAtItsOwnRequestRegistersAgain(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	c.WaitForActive(t, activeTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := freeAddr(t)
	register := func() *keelpb.RegisterBrokerResponse {
		t.Helper()
		resp, err := c.Client().RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: uuid.NewString(), Address: addr,
			MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
		if err != nil {
			t.Fatalf("register broker 1: %v", err)
		}
		return resp
	}
	heartbeat := func(epoch int64, wantFence bool) *keelpb.BrokerHeartbeatResponse {
		t.Helper()
		resp, err := c.Client().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: epoch,
			MetadataOffset: uint64(epoch), WantFence: wantFence})
		if err != nil {
			t.Fatalf("heartbeat of broker 1 at epoch %d (want_fence %v): %v", epoch, wantFence, err)
		}
		return resp
	}
	first := register().BrokerEpoch
	poll.Until(t, 10*time.Second, "broker 1 to be unfenced", func() bool { return !heartbeat(first, false).IsFenced })
	poll.Until(t, 10*time.Second, "broker 1 to be fenced at its own request", func() bool { return heartbeat(first, true).IsFenced })
	heartbeat(first, true) // alive, and asking to stay fenced
	if next := register().BrokerEpoch; next <= first {
		t.Fatalf("broker 1's next incarnation registered at epoch %d, want above %d", next, first)
	}
}
