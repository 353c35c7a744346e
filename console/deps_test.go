package console

import (
	"testing"

	"github.com/keel-dev/keel/internal/deps"
)

// TestConsole_LinksNoRaftNorServer: the console reads a controller through
// Source (server.LocalReads), and links neither raft nor the server that
// implements it, so that it is tested on a fake.
func TestConsole_LinksNoRaftNorServer(t *testing.T) {
	deps.LinksNone(t, "github.com/keel-dev/keel/console", append(deps.Raft(), "github.com/keel-dev/keel/server", "github.com/keel-dev/keel/raftlog"))
}
