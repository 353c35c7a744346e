package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
)

func TestReadiness_Check(t *testing.T) {
	tests := []struct {
		name    string
		r       readiness
		wantErr string // "" for ready
	}{
		{
			name: "caught-up follower",
			r:    readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 40},
		},
		{
			name: "follower ahead of the commit index it last heard",
			r:    readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 41},
		},
		{
			name:    "follower behind",
			r:       readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 12},
			wantErr: "applied up to index 12 of the leader's commit index 40",
		},
		{
			name:    "no leader known",
			r:       readiness{state: raft.Follower, leaderID: -1, commitIndex: 40, appliedIndex: 40},
			wantErr: "no raft leader known (raft state Follower)",
		},
		{
			name:    "candidate",
			r:       readiness{state: raft.Candidate, leaderID: -1},
			wantErr: "no raft leader known (raft state Candidate)",
		},
		{
			name: "active leader",
			r:    readiness{state: raft.Leader, leaderID: 1, active: true, commitIndex: 40, appliedIndex: 40},
		},
		{
			// Its own writes in flight: committed, not yet applied.
			name: "active leader with writes in flight",
			r:    readiness{state: raft.Leader, leaderID: 1, active: true, commitIndex: 41, appliedIndex: 40},
		},
		{
			name:    "leader taking over",
			r:       readiness{state: raft.Leader, leaderID: 1, commitIndex: 40, appliedIndex: 40},
			wantErr: "not the active controller yet",
		},
		{
			// Whatever else holds: a leader too.
			name: "image diverged",
			r: readiness{state: raft.Leader, leaderID: 1, active: true, commitIndex: 40, appliedIndex: 40,
				diverged: &fsm.Divergence{Index: 38, Reason: "its state machine refused committed entry 38 (term 2), which the leader's accepted: boom"}},
			wantErr: "this node's metadata image diverged at index 38: its state machine refused committed entry 38 (term 2), which the leader's accepted: boom; it does not act on it",
		},
		{
			name:    "stopping",
			r:       readiness{stopping: true, state: raft.Leader, leaderID: 1, active: true, commitIndex: 40, appliedIndex: 40},
			wantErr: "stopping",
		},
		{
			// Raft's commit index is all applied, but the leader announced
			// a later one long ago: the follower cannot store entries.
			name: "follower behind the leader's announced commit",
			r: readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 40,
				announced: 41, announcedAgo: applyLagBound + time.Millisecond},
			wantErr: "applied up to index 40; the leader announced commit index 41 2.001s ago",
		},
		{
			name: "follower a moment behind the leader's announced commit",
			r: readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 40,
				announced: 90, announcedAgo: applyLagBound / 2},
		},
		{
			name: "storage failed",
			r: readiness{state: raft.Follower, leaderID: 2, commitIndex: 40, appliedIndex: 40,
				storageFailedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), storageErr: errors.New("write raft.db: no space left on device")},
			wantErr: "raft storage failed at 2026-01-02T03:04:05Z: write raft.db: no space left on device (ready again once a write succeeds)",
		},
		{
			name: "storage failed on the active leader",
			r: readiness{state: raft.Leader, leaderID: 1, active: true, commitIndex: 40, appliedIndex: 40,
				storageFailedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), storageErr: errors.New("read-only file system")},
			wantErr: "raft storage failed at",
		},
		{
			name:    "shut down",
			r:       readiness{state: raft.Shutdown, leaderID: -1},
			wantErr: "no raft leader known",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.check()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("check() = %v, want ready", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("check() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
