package kafka

import (
	"os/exec"
	"strings"
	"testing"
)

// TestListener_LinksNoDataPlane: the listener and the data plane meet at
// broker.Backend, and neither links the other, so the listener serves any
// data plane (MemoryBackend in its tests) and the data plane any front.
func TestListener_LinksNoDataPlane(t *testing.T) {
	for _, tc := range []struct{ pkg, forbidden string }{
		{"github.com/keel-dev/keel/broker/kafka", "github.com/keel-dev/keel/broker/replication"},
		{"github.com/keel-dev/keel/broker/kafka", "github.com/keel-dev/keel/broker/partlog"},
		{"github.com/keel-dev/keel/broker/replication", "github.com/keel-dev/keel/broker/kafka"},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Fatalf("go list -deps %s listed nothing", tc.pkg)
		}
		for _, dep := range deps {
			if dep == tc.forbidden {
				t.Errorf("%s links %s", tc.pkg, tc.forbidden)
			}
		}
	}
}
