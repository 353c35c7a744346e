package broker

import (
	"testing"

	"github.com/keel-dev/keel/internal/deps"
)

// TestLibrary_LinksNoControllerOrRaft: teams embed this package (and the
// client library under it, rpc, the storage, partlog, the data plane,
// replication, the Kafka listener, kafka, and node, which assembles them)
// in their own servers. None may pull the controller quorum into their
// binary: raft, its log stores, bbolt, or Keel's controller, raftlog and
// server packages.
// The arrows of the design point the other way (docs/design.md).
func TestLibrary_LinksNoControllerOrRaft(t *testing.T) {
	forbidden := append(deps.Raft(), "github.com/keel-dev/keel/controller", "github.com/keel-dev/keel/raftlog", "github.com/keel-dev/keel/server")
	for _, pkg := range []string{"github.com/keel-dev/keel/broker", "github.com/keel-dev/keel/broker/partlog", "github.com/keel-dev/keel/broker/replication", "github.com/keel-dev/keel/broker/kafka", "github.com/keel-dev/keel/broker/node", "github.com/keel-dev/keel/rpc"} {
		deps.LinksNone(t, pkg, forbidden)
	}
}
