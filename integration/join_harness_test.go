package integration

import (
	"context"
	"time"

	"github.com/keel-dev/keel/keeltest/keelproc"
)

// StartJoiner starts controller id, the next id after the cluster's nodes,
// on a free loopback port with an empty data dir and --join (plus the flags
// the cluster gives every controller), and waits until it has started: a
// node waiting to be added to the quorum (keel quorum add-voter). From then
// on it is one of the cluster's nodes: Stop, Start, Kill and Live know it.
// The cluster's client does not have its address; leader hints lead there.
func (c *Cluster) StartJoiner(id int32) *keelproc.Node {
	t := c.t
	t.Helper()
	if next := int32(len(c.h.Controllers()) + 1); id != next {
		t.Fatalf("StartJoiner(%d): the next node id is %d", id, next)
	}
	nd, err := c.h.StartJoiner(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// waitExited waits until node id's process exits by itself, and returns its
// exit status.
func (c *Cluster) waitExited(id int32, timeout time.Duration) int {
	t := c.t
	t.Helper()
	nd := c.node(id)
	if !nd.Wait(timeout) {
		t.Fatalf("node %d still running %s later; its output ends:\n%s", id, timeout, keelproc.LastLines(nd.Output(), 10))
	}
	return nd.ExitCode()
}
