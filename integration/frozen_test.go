package integration

import (
	"strings"
	"testing"
	"time"
)

// TestCLI_FrozenControllerCostsNothing: with the first controller in
// --controllers stopped (SIGSTOP: its port accepts, nobody answers), admin
// writes and reads with a 2 s --timeout still succeed through the others,
// each in well under the timeout. Writes used to spend about 2 s on the
// frozen node, and with --timeout 2s all of them failed.
func TestCLI_FrozenControllerCostsNothing(t *testing.T) {
	c, leader, _ := startBrokerCluster(t, 3, 1)
	frozen := int32(1)
	for frozen == leader {
		frozen++
	}
	c.Pause(frozen)
	defer c.Resume(frozen)
	addrs := []string{c.Addr(frozen)}
	for _, id := range c.IDs() {
		if id != frozen {
			addrs = append(addrs, c.Addr(id))
		}
	}
	controllers := strings.Join(addrs, ",")
	for i, args := range [][]string{
		{"topic", "create", "frozen-0", "--partitions", "1", "--replication-factor", "1"},
		{"topic", "create", "frozen-1", "--partitions", "1", "--replication-factor", "1"},
		{"quorum", "verify"},
		{"topic", "describe", "frozen-1"},
		{"topic", "delete", "frozen-0"},
	} {
		start := time.Now()
		stdout, stderr, code := runKeel(t, 30*time.Second, append(args, "--controllers", controllers, "--timeout", "2s")...)
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("command %d (keel %s) with controller %d frozen: exit %d\n%s%s", i, strings.Join(args, " "), frozen, code, stdout, stderr)
		}
		if took > time.Second {
			t.Errorf("keel %s took %v with controller %d frozen", strings.Join(args, " "), took.Round(time.Millisecond), frozen)
		}
		t.Logf("keel %s: %v", strings.Join(args, " "), took.Round(time.Millisecond))
	}
}
