package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLocalQuorum_CommitsAndStopsCleanly runs the builder `keel dev` and
// keeltest share by itself, and stops it as `keel dev` does.
func TestLocalQuorum_CommitsAndStopsCleanly(t *testing.T) {
	q, err := server.StartLocalQuorum(3, t.TempDir(), raftlog.DefaultTiming(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var active *server.Node
	poll.Until(t, 10*time.Second, "an active controller", func() bool { active = q.Active(); return active != nil })
	index, err := active.Controller().Propose(context.Background(), noOps(3)...)
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	for _, n := range q.Nodes {
		poll.Until(t, 5*time.Second, fmt.Sprintf("node at %s to apply index %d", n.Addr(), index), func() bool {
			return n.FSM().Image().Offset >= index
		})
		if img := n.FSM().Image(); img.ControllerEpoch != 1 || img.ClusterID == "" {
			t.Fatalf("node at %s: image %+v", n.Addr(), img)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestStartController_RefusesBadConfig(t *testing.T) {
	voters := []raftlog.Voter{{ID: 1, Address: "127.0.0.1:1"}}
	badTiming := raftlog.DefaultTiming()
	badTiming.LeaderLeaseTimeout = time.Second
	tests := []struct {
		name    string
		cfg     server.NodeConfig
		wantErr string
	}{
		{name: "node not among voters", cfg: server.NodeConfig{NodeID: 2, Voters: voters, DataDir: t.TempDir(), Timing: raftlog.DefaultTiming()}, wantErr: "--voters does not contain node id 2"},
		{name: "lease longer than heartbeat", cfg: server.NodeConfig{NodeID: 1, Voters: voters, DataDir: t.TempDir(), Timing: badTiming}, wantErr: "--raft-leader-lease-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			n, err := server.StartNode(tt.cfg)
			if err == nil {
				n.Close()
				t.Fatal("StartNode succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}
