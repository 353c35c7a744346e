package integration

import (
	"strings"
	"testing"
	"time"
)

// TestGroupCLI_NoCoordinatorSaysWhy: with one broker, __consumer_offsets
// (replication factor 3 by default) cannot be made; keel group fails in
// one line that says so and names the flag, rather than timing out.
func TestGroupCLI_NoCoordinatorSaysWhy(t *testing.T) {
	_, kafka := startKafkaCluster(t, []int32{1})
	boot := "--bootstrap=" + strings.Join(bootstrap(kafka), ",")
	for _, args := range [][]string{
		{"group", "describe", "app"},
		{"group", "reset-offsets", "app", "--all-topics", "--to-earliest", "--execute"},
		{"group", "delete", "app"},
	} {
		_, stderr, code := runKeel(t, 30*time.Second, append(args, boot, "--timeout=3s")...)
		stderr = strings.TrimSpace(stderr)
		t.Logf("%s: %s", strings.Join(args[:2], " "), stderr)
		if code == 0 || strings.Contains(stderr, "\n") || !strings.Contains(stderr, "COORDINATOR_NOT_AVAILABLE") ||
			!strings.Contains(stderr, "--offsets-topic-replication-factor") {
			t.Errorf("keel %s: exit %d, stderr %q; want one line naming COORDINATOR_NOT_AVAILABLE and --offsets-topic-replication-factor",
				strings.Join(args, " "), code, stderr)
		}
	}
}
