package controller

import (
	"testing"

	"github.com/keel-dev/keel/internal/deps"
)

// TestController_LinksNoRaft: the controller runs on consensus.Log and
// links no implementation of it: not raft, its log stores, bbolt, nor
// raftlog. So everything it decides can run over an in-memory log, and the
// arrows of the design point one way: server → controller → consensus ←
// raftlog (docs/design.md).
func TestController_LinksNoRaft(t *testing.T) {
	forbidden := append(deps.Raft(), "github.com/keel-dev/keel/raftlog", "github.com/keel-dev/keel/server")
	deps.LinksNone(t, "github.com/keel-dev/keel/controller", forbidden)
}
