package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/server"
)

func TestFeatures_CheckMetadataVersions(t *testing.T) {
	for _, tc := range []struct {
		name             string
		initial, testMax uint32
		wantErr          string
	}{
		{name: "the latest", initial: fsm.MaxMetadataVersion},
		{name: "the lowest", initial: fsm.MinMetadataVersion},
		{name: "level 0", initial: 0, wantErr: fmt.Sprintf("--initial-metadata-version 0: this node supports metadata.version 1-%d", fsm.MaxMetadataVersion)},
		{name: "above the binary", initial: fsm.MaxMetadataVersion + 1, wantErr: fmt.Sprintf("--initial-metadata-version %d", fsm.MaxMetadataVersion+1)},
		{name: "above a pretended older binary", initial: 2, testMax: 1, wantErr: "this node supports metadata.version 1-1"},
		{name: "a pretended range above the binary", initial: 1, testMax: fsm.MaxMetadataVersion + 1, wantErr: fmt.Sprintf("--test-max-metadata-version %d: this binary supports", fsm.MaxMetadataVersion+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMetadataVersions(tc.initial, tc.testMax)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestFeatures_DescribeUpgradeDowngrade: keel features against a quorum
// started at level 1: describe shows the level and the controller's range,
// upgrade raises it (and says so when it already is), a lowering without
// downgrade and a downgrade that would drop the controller registrations
// are refused, each in one line saying why.
func TestFeatures_DescribeUpgradeDowngrade(t *testing.T) {
	c := keeltest.NewCluster(t, 1, keeltest.WithTune(func(cfg *server.NodeConfig) { cfg.InitialMetadataVersion = 1 }))
	c.WaitForActive(10 * time.Second)
	addrs := "--controllers=" + strings.Join(c.Addrs(), ",")

	out, err := runKeel(t, "features", "describe", addrs)
	if err != nil || !strings.Contains(out, "metadata.version: 1\n") || !strings.Contains(out, "controller  1   ") || !strings.Contains(out, fmt.Sprintf("1-%d", fsm.MaxMetadataVersion)) {
		t.Fatalf("features describe: %v\n%s", err, out)
	}
	if _, err := runKeel(t, "features", "upgrade", addrs); err == nil || !strings.Contains(err.Error(), "--metadata-version is required") {
		t.Fatalf("features upgrade without a level: err = %v", err)
	}
	out, err = runKeel(t, "features", "upgrade", "--metadata-version", "2", addrs)
	if err != nil || !strings.HasPrefix(out, "metadata.version 1 -> 2 (index ") {
		t.Fatalf("features upgrade: %v\n%s", err, out)
	}
	out, err = runKeel(t, "features", "upgrade", "--metadata-version", "2", addrs)
	if err != nil || out != "metadata.version is already 2\n" {
		t.Fatalf("features upgrade again: %v\n%s", err, out)
	}
	if _, err := runKeel(t, "features", "upgrade", "--metadata-version", "1", addrs); err == nil ||
		!strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "lowering the level is a downgrade") {
		t.Fatalf("features upgrade to a lower level: err = %v", err)
	}
	// The registration follows the raise (the active controller asks again).
	poll.Until(t, 10*time.Second, "the controller's registration", func() bool {
		a := c.Active()
		return a != nil && len(a.FSM().Image().Controllers()) == 1
	})
	if _, err := runKeel(t, "features", "downgrade", "--metadata-version", "1", addrs); err == nil ||
		!strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "1 controller registrations (metadata.version 2) would be dropped") {
		t.Fatalf("features downgrade: err = %v", err)
	}
}
