package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/raftlog"
)

func TestSelfVoter(t *testing.T) {
	voters := []raftlog.Voter{{ID: 1, Address: "10.0.0.1:9091"}, {ID: 2, Address: "10.0.0.2:9091"}}
	tests := []struct {
		name    string
		cfg     NodeConfig
		want    raftlog.Voter
		wantErr string
	}{
		{name: "in the voter list", cfg: NodeConfig{NodeID: 2, Voters: voters, Listen: "0.0.0.0:9091"}, want: voters[1]},
		{name: "joining, in the voter list", cfg: NodeConfig{NodeID: 2, Voters: voters, Join: true}, want: voters[1]},
		{name: "joining, by --listen", cfg: NodeConfig{NodeID: 4, Join: true, Listen: "10.0.0.4:9091"}, want: raftlog.Voter{ID: 4, Address: "10.0.0.4:9091"}},
		{name: "joining, a list without it", cfg: NodeConfig{NodeID: 4, Voters: voters, Join: true, Listen: "10.0.0.4:9091"}, want: raftlog.Voter{ID: 4, Address: "10.0.0.4:9091"}},
		{name: "joining without --listen", cfg: NodeConfig{NodeID: 4, Join: true}, wantErr: "--join needs --listen"},
		{name: "joining with a bad --listen", cfg: NodeConfig{NodeID: 4, Join: true, Listen: ":9091"}, wantErr: `--listen: bad address ":9091": missing host`},
		{name: "not joining, not in the list", cfg: NodeConfig{NodeID: 4, Voters: voters, Listen: "10.0.0.4:9091"}, wantErr: "--voters does not contain node id 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selfVoter(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("selfVoter = %v, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("selfVoter = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestJoin_AddedThenRemoved: a node started with Join and an empty data dir
// bootstraps nothing; added, it catches up and records the cluster id in its
// data dir; removed, it reports ErrRemoved on Fatal.
func TestJoin_AddedThenRemoved(t *testing.T) {
	q, active := startQuorum(t, 3)
	ctx := context.Background()
	mux, err := raftlog.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := mux.Addr().String()
	n4, err := StartNode(NodeConfig{NodeID: 4, Join: true, Listen: addr, Mux: mux, DataDir: t.TempDir(),
		Timing: raftlog.DefaultTiming(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	if d := n4.Controller().Describe("test"); len(d.Voters) != 0 || d.ClusterId != "" {
		t.Fatalf("a joining node bootstrapped: %v", d)
	}

	res, err := active.Controller().AddVoter(ctx, 4, addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != 4 {
		t.Fatalf("AddVoter: members %v", res.Members)
	}
	index, err := active.Controller().Propose(ctx, noOps(1)...)
	if err != nil {
		t.Fatal(err)
	}
	cluster := active.FSM().Image().ClusterID
	deadline := time.Now().Add(10 * time.Second)
	for n4.FSM().Image().Offset < index || n4.node.ClusterID() != cluster {
		if time.Now().After(deadline) {
			t.Fatalf("node 4: applied %d of %d, recorded cluster id %q of %q", n4.FSM().Image().Offset, index, n4.node.ClusterID(), cluster)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := q.Active().Controller().RemoveVoter(ctx, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n4.Fatal():
		if !errors.Is(err, controller.ErrRemoved) {
			t.Fatalf("Fatal = %v, want ErrRemoved", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the removed node did not notice within 15s")
	}
}
