package controller

import (
	"testing"

	"github.com/keel-dev/keel/fsm"
)

// TestNoLeaderReason: what `keel topic describe` says of a partition
// without a leader.
func TestNoLeaderReason(t *testing.T) {
	all := []int32{1, 2, 3}
	tests := []struct {
		name    string
		p       elrPartition
		active  []int32
		configs map[string]string
		want    string
	}{
		{name: "a leader", p: elrPartition{replicas: all, isr: all, leader: 1}, active: all},
		{name: "its last ISR member restarted uncleanly", active: []int32{1},
			p:    elrPartition{replicas: all, isr: []int32{}, elr: []int32{2}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			want: "no leader: its last ISR member restarted after an unclean shutdown; waiting for an eligible replica (ELR 2: fenced) to return, or an unclean election (keel partition elect --type unclean)"},
		{name: "every clean replica restarted uncleanly", active: []int32{2},
			p:    elrPartition{replicas: all, isr: []int32{}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			want: "no leader: every replica known to hold every committed record restarted after an unclean shutdown; waiting for its last leader (1: fenced) to return and lead with what it has, or an unclean election (keel partition elect --type unclean)"},
		{name: "no ISR member is eligible, unclean election on", configs: map[string]string{fsm.UncleanLeaderElection: "true"},
			p:    elrPartition{replicas: all, isr: []int32{1}, elr: []int32{2, 3}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			want: "no leader: no ISR member is eligible (ISR 1: fenced); waiting for an ISR member or an eligible replica (ELR 2: fenced, 3: fenced) to return, or any replica to return (unclean.leader.election.enable=true)"},
		{name: "an ISR member may lead, not elected yet", active: []int32{1},
			p:    elrPartition{replicas: all, isr: []int32{1}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			want: "no leader yet: broker 1 may lead it, and will at the next election"},
		{name: "nothing known", active: []int32{2},
			p:    elrPartition{replicas: all, isr: []int32{}, leader: fsm.NoLeader},
			want: "no leader: no replica is known to hold every committed record; waiting for an unclean election (keel partition elect --type unclean)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := elrImageAt(t, emptyISRLevel, tt.active, tt.configs, tt.p)
			if got := NoLeaderReason(img, elrOf(img)); got != tt.want {
				t.Fatalf("NoLeaderReason:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
