package integration

import (
	"errors"
	"net"
	"os"
	"strconv"
	"time"
)

// StartJoiner starts controller id, the next id after the cluster's nodes,
// on a free loopback port with an empty data dir and --join (plus the flags
// the cluster gives every controller: controllerArgs), and waits until it
// has started: a node waiting to be added to the quorum (keel quorum
// add-voter). From then
// on it is one of the cluster's nodes: Stop, Start, Kill and Live know it.
// The cluster's client does not have its address; leader hints lead there.
func (c *Cluster) StartJoiner(id int32) *procNode {
	t := c.t
	t.Helper()
	if int(id) != len(c.nodes)+1 {
		t.Fatalf("StartJoiner(%d): the next node id is %d", id, len(c.nodes)+1)
	}
	if c.net != nil {
		t.Fatalf("StartJoiner(%d): not supported with withFaultNet", id)
	}
	nd := c.newControllerNode(id)
	c.nodes = append(c.nodes, nd)
	var err error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		nd.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, 1)[0]))
		nd.args = c.controllerArgs(nd, "--join")
		if err = os.RemoveAll(nd.dataDir); err != nil {
			t.Fatal(err)
		}
		if err = c.launch(nd); err != nil {
			t.Fatalf("start node %d: %v", id, err)
		}
		if err = c.waitStarted(nd); err == nil {
			return nd
		}
		nd.proc.stop(5 * time.Second)
		if !errors.Is(err, errBind) {
			break
		}
	}
	t.Fatalf("start node %d with --join: %v", id, err)
	return nil
}

// waitExited waits until node id's process exits by itself, and returns its
// exit status.
func (c *Cluster) waitExited(id int32, timeout time.Duration) int {
	t := c.t
	t.Helper()
	nd := c.node(id)
	if !nd.proc.wait(timeout) {
		t.Fatalf("node %d still running %s later; its output ends:\n%s", id, timeout, lastLines(nd.output(), 10))
	}
	return nd.proc.exitCode()
}
