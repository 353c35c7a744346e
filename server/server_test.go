package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/raftlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocalQuorum_CommitsAndStopsCleanly(t *testing.T) {
	q, active := startQuorum(t, 3)
	index, err := active.Controller().Propose(context.Background(), noOps(3)...)
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range q.Nodes {
		for n.FSM().Image().Offset < index {
			if time.Now().After(deadline) {
				t.Fatalf("node at %s did not apply index %d", n.Addr(), index)
			}
			time.Sleep(5 * time.Millisecond)
		}
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
		cfg     NodeConfig
		wantErr string
	}{
		{name: "node not among voters", cfg: NodeConfig{NodeID: 2, Voters: voters, DataDir: t.TempDir(), Timing: raftlog.DefaultTiming()}, wantErr: "--voters does not contain node id 2"},
		{name: "lease longer than heartbeat", cfg: NodeConfig{NodeID: 1, Voters: voters, DataDir: t.TempDir(), Timing: badTiming}, wantErr: "--raft-leader-lease-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			n, err := StartNode(tt.cfg)
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
