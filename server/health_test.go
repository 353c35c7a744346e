package server_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/server"
)

// TestController_ReadyOnEveryCaughtUpNode: in a quorum every node becomes
// ready, and one that is closing is not.
func TestController_ReadyOnEveryCaughtUpNode(t *testing.T) {
	c, _ := startCluster(t, 3)
	for _, n := range c.Nodes() {
		poll.Until(t, 10*time.Second, fmt.Sprintf("node %d ready", n.ID()), func() bool { return n.Ready() == nil })
	}
	n := c.Node(1)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); !errors.Is(err, server.ErrStopping) {
		t.Errorf("Ready after Close = %v, want %v", err, server.ErrStopping)
	}
}
