package integration

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// StartJoiner starts controller id, the next id after the cluster's nodes,
// on a free loopback port with an empty data dir and --join (plus the
// cluster's TLS and controller flags), and waits until it has started: a
// node waiting to be added to the quorum (keel quorum add-voter). From then
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
	nd := &procNode{
		name:    fmt.Sprintf("node %d", id),
		ready:   `msg="controller started"`,
		id:      id,
		dataDir: filepath.Join(c.dir, fmt.Sprintf("n%d", id)),
		logPath: filepath.Join(c.dir, fmt.Sprintf("n%d.log", id)),
	}
	c.nodes = append(c.nodes, nd)
	var err error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		nd.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, 1)[0]))
		nd.args = []string{"controller",
			"--node-id", strconv.Itoa(int(id)),
			"--listen", nd.addr,
			"--data-dir", nd.dataDir,
			"--join",
		}
		nd.args = append(nd.args, c.opts.tlsFlags(fmt.Sprintf("controller-%d", id))...)
		nd.args = append(nd.args, c.opts.controllerFlags...)
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
