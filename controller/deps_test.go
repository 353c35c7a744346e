package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// TestController_LinksNoRaft: the controller runs on consensus.Log and
// links no implementation of it: not raft, its log stores, bbolt, nor
// raftlog. So everything it decides can run over an in-memory log, and the
// arrows of the design point one way: server → controller → consensus ←
// raftlog (docs/design.md).
func TestController_LinksNoRaft(t *testing.T) {
	forbidden := []string{
		"github.com/hashicorp/raft",
		"github.com/hashicorp/raft-boltdb",
		"github.com/hashicorp/raft-wal",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/keel-dev/keel/raftlog",
		"github.com/keel-dev/keel/server",
	}
	const pkg = "github.com/keel-dev/keel/controller"
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s links %s (through %s)", pkg, f, dep)
			}
		}
	}
}
