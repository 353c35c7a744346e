package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
)

// featuresJSON is `keel features describe -o json`.
type featuresJSON struct {
	MetadataVersion uint32 `json:"metadata_version"`
	Nodes           []struct {
		Kind               string `json:"kind"`
		ID                 int32  `json:"id"`
		MinMetadataVersion uint32 `json:"min_metadata_version"`
		MaxMetadataVersion uint32 `json:"max_metadata_version"`
		Error              string `json:"error"`
	} `json:"nodes"`
}

// featureUpdateJSON is `keel features upgrade|downgrade -o json`.
type featureUpdateJSON struct {
	PreviousMetadataVersion uint32 `json:"previous_metadata_version"`
	MetadataVersion         uint32 `json:"metadata_version"`
	Index                   uint64 `json:"index"`
}

// oldBinaryFlag makes a node say it supports metadata.version 1 only, as a
// binary of the previous release does (the hidden test wiring of keel
// controller and keel broker).
var oldBinaryFlag = []string{"--test-max-metadata-version", "1"}

// upgradePause bounds the longest pause of the steady writer while a
// controller is upgraded: a leadership handoff and a takeover, as
// maxRestartPause, with more room for a machine loaded by six processes.
const upgradePause = 3 * time.Second

// withoutFlag returns args without the flag name and its value.
func withoutFlag(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestUpgrade_RollingUpgradeThenRaiseMetadataVersion is the upgrade
// procedure of docs/operations.md on real processes: a quorum and brokers
// of the "previous release" (every node says it supports level 1 only,
// the cluster started at level 1) are upgraded one node at a time,
// controllers then brokers, while one client writes back to back; the
// raise of the level is refused, naming the node, while any node is still
// old, and goes through once none is. Afterwards every node reports the
// new range, the controllers are registered, a snapshot states the level,
// and a downgrade that would drop the registrations is refused.
func TestUpgrade_RollingUpgradeThenRaiseMetadataVersion(t *testing.T) {
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout),
		withControllerFlags(append([]string{"--initial-metadata-version", "1"}, oldBinaryFlag...)...))
	c.WaitForActive(t, activeTimeout)
	brokers := []int32{1, 2, 3}
	var opts [][]brokerOption
	for range brokers {
		opts = append(opts, []brokerOption{withBrokerFlags(oldBinaryFlag...)})
	}
	c.startBrokers(brokers, opts)
	c.WaitForBrokers(t, allActive(brokers...))

	var f featuresJSON
	c.keelJSON(t, &f, "features", "describe")
	if f.MetadataVersion != 1 || len(f.Nodes) != 6 {
		t.Fatalf("before the upgrade: %+v; want level 1, 3 controllers and 3 brokers", f)
	}
	for _, n := range f.Nodes {
		if n.MaxMetadataVersion != 1 || n.Error != "" {
			t.Fatalf("before the upgrade, %s %d: %+v; want 1-1", n.Kind, n.ID, n)
		}
	}

	w := startWriter(c)
	t.Cleanup(w.stop)
	w.waitWrites(t, 20)

	// The controllers, followers first, the active one last.
	leader, _ := c.WaitForActive(t, activeTimeout)
	order := append(otherThan(c.IDs(), leader), leader)
	for i, id := range order {
		expectRefused(t, "", c.adminArgs("features", "upgrade", "--metadata-version", "2"),
			"keel: FailedPrecondition", fmt.Sprintf("controller %d supports 1-1", id))
		before := time.Now()
		c.Stop(id)
		nd := c.node(id)
		nd.SetArgs(withoutFlag(nd.Args(), oldBinaryFlag[0]))
		c.Restart(id)
		c.WaitForApplied(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
		w.waitWrites(t, 20)
		if gap := w.longestGapSince(before); gap > upgradePause {
			t.Fatalf("controller %d (%d of 3): writes paused for %s", id, i+1, gap)
		} else {
			t.Logf("controller %d upgraded; writes paused for at most %.1fms", id, ms(gap))
		}
	}

	// The brokers: still old, they hold the level back.
	for _, id := range brokers {
		expectRefused(t, "", c.adminArgs("features", "upgrade", "--metadata-version", "2"),
			"keel: FailedPrecondition", fmt.Sprintf("broker %d supports 1-1", id))
		c.StopBroker(id)
		nd := c.broker(id)
		nd.SetArgs(withoutFlag(nd.Args(), oldBinaryFlag[0]))
		c.RestartBroker(id)
		c.WaitForBrokers(t, allActive(brokers...))
	}

	var u featureUpdateJSON
	c.keelJSON(t, &u, "features", "upgrade", "--metadata-version", "2")
	if u.PreviousMetadataVersion != 1 || u.MetadataVersion != 2 || u.Index == 0 {
		t.Fatalf("keel features upgrade: %+v; want 1 -> 2", u)
	}
	w.waitWrites(t, 20)
	w.stop()
	if errs := w.failures(); len(errs) > 0 {
		t.Logf("%d writes were refused or timed out during the handoffs and retried; first: %s", len(errs), errs[0])
	}

	c.keelJSON(t, &f, "features", "describe")
	if f.MetadataVersion != 2 {
		t.Fatalf("after the upgrade: level %d, want 2", f.MetadataVersion)
	}
	for _, n := range f.Nodes {
		if n.MaxMetadataVersion != fsm.MaxMetadataVersion || n.Error != "" {
			t.Fatalf("after the upgrade, %s %d: %+v", n.Kind, n.ID, n)
		}
	}
	// The controllers are registered from level 2 on (the active
	// controller writes them right after the raise): a downgrade would
	// drop them, and is refused with the reason.
	args := c.adminArgs("features", "downgrade", "--metadata-version", "1")
	poll.UntilState(t, 30*time.Second, "the downgrade to be refused for the controller registrations", func() (bool, string) {
		_, stderr, code := runKeel(t, 30*time.Second, args...)
		return code == 1 && strings.Contains(stderr, "would be dropped"), stderr
	})
	expectRefused(t, "", args, "keel: FailedPrecondition", "3 controller registrations (metadata.version 2) would be dropped")

	_, saved := c.saveSnapshot(t)
	if saved.MetadataVersion != 2 {
		t.Fatalf("snapshot save: %+v; want metadata_version 2", saved)
	}
}
