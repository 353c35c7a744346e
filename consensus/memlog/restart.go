package memlog

import "fmt"

// Restart starts node id again after Shutdown, as a raft server restarted
// on its data dir: a new Node, with a new state machine from the cluster's
// sm, that replays the committed log from its start and hears the leader
// as before (a node Silence cut off stays cut off). The old Node stays shut
// down. It panics if id has no node or its node is running: a test's
// mistake.
func (c *Cluster) Restart(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.nodes[id]
	if !ok || !old.killed {
		panic(fmt.Sprintf("memlog: restart %d: no stopped node %d", id, id))
	}
	delete(c.nodes, id)
	n := c.addNodeLocked(id)
	n.silenced = old.silenced
	c.refreshLocked()
	return n
}
