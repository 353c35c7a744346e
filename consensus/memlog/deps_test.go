package memlog

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLinksOnlyConsensus: the controller's tests link this package, and
// it must bring them nothing of raft, bolt or Keel's other packages: the
// standard library and the interface it implements only.
func TestLinksOnlyConsensus(t *testing.T) {
	const self = "github.com/keel-dev/keel/consensus/memlog"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", self, err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, self) {
		t.Fatalf("go list -deps %s did not list the package itself: %q", self, deps)
	}
	for _, dep := range deps {
		if dep != self && dep != "github.com/keel-dev/keel/consensus" {
			t.Errorf("%s links %s", self, dep)
		}
	}
}
