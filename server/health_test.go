package server_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/server"
	"github.com/prometheus/client_golang/prometheus"
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

// TestNode_StorageErrorsMetric: the node registers its storage error
// counter with its registry, and takes it away when it closes.
func TestNode_StorageErrorsMetric(t *testing.T) {
	c := keeltest.NewCluster(t, 1, keeltest.WithMetrics())
	n := c.WaitForActive(10 * time.Second)
	reg := c.Metrics(n.ID())
	if v, ok := gathered(t, reg, server.MetricRaftStorageErrors); !ok || v != 0 {
		t.Errorf("%s = %v (registered: %v) on a healthy node, want 0", server.MetricRaftStorageErrors, v, ok)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := gathered(t, reg, server.MetricRaftStorageErrors); ok {
		t.Errorf("%s still registered after Close", server.MetricRaftStorageErrors)
	}
}

// gathered returns the value of the counter name in reg, if it is there.
func gathered(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return 0, false
}
