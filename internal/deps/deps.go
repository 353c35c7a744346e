// Package deps checks, in tests, which packages a package links, so that
// the arrows of the design (docs/design.md) keep pointing one way.
package deps

import (
	"os/exec"
	"strings"
	"testing"
)

// Raft lists raft and the log stores and databases under it, which only a
// controller process links.
func Raft() []string {
	return []string{
		"github.com/hashicorp/raft",
		"github.com/hashicorp/raft-boltdb",
		"github.com/hashicorp/raft-wal",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
	}
}

// LinksNone fails t for every package in forbidden, or under it, that pkg
// links, as go list -deps reports them.
func LinksNone(t testing.TB, pkg string, forbidden []string) {
	t.Helper()
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
