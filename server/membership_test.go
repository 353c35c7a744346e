package server

import (
	"strings"
	"testing"

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
