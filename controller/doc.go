// Package controller is the active controller: it turns leadership of the
// replicated log into the Kafka controller role (the ZooKeeper-era
// /controller znode). It runs on consensus.Log, as KRaft's QuorumController
// runs over RaftClient, and links no raft: raftlog implements the log for
// production, an in-memory log for tests.
//
// A node becomes the active controller in three steps once the log makes it
// leader: a Barrier, so its FSM holds every committed record; a committed
// ControllerEpoch record with the current epoch + 1 (and the ClusterId record
// on a brand-new cluster); then the event loop starts and writes are accepted.
// A takeover that fails is retried for as long as the node leads; one that
// keeps failing for a few election timeouts hands leadership to another
// node, which may succeed where this one cannot.
// On losing leadership everything the leadership started is stopped before
// anything else happens. Every state-changing decision runs on the one event
// loop goroutine, one at a time, as the ZooKeeper-era ControllerEventManager did;
// the loop pipelines them (group.go): it decides the next while the entries of
// the earlier ones are still committing, as KRaft's QuorumController does.
package controller
