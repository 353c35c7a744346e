package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
)

// runKeelSplit runs the keel command line in this process and returns its
// stdout and stderr apart.
func runKeelSplit(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func statusJSON(t *testing.T, args ...string) (quorumStatus, error) {
	t.Helper()
	out, _, err := runKeelSplit(t, append([]string{"quorum", "status", "-o", "json"}, args...)...)
	var st quorumStatus
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
		t.Fatalf("quorum status -o json: %v (err %v) in %q", jerr, err, out)
	}
	return st, err
}

func TestQuorumStatus_OneFollowerIsEnough(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	c.WaitForActive(10 * time.Second)
	// Polled: on a loaded machine a 50 ms lease may move leadership on
	// between looking and asking.
	poll.UntilState(t, 20*time.Second, "quorum status from one follower to name the active controller", func() (bool, string) {
		leader := c.Active()
		if leader == nil {
			return false, "no active controller"
		}
		var follower string
		for _, n := range c.Nodes() {
			if n.ID() != leader.ID() {
				follower = n.Addr()
				break
			}
		}
		st, err := statusJSON(t, "--controllers", follower)
		if err != nil || st.LeaderID != leader.ID() || st.LeaderKnownBy != leader.ID() || len(st.Voters) != 3 {
			return false, fmt.Sprintf("from follower %s: %v, %+v; want leader %d", follower, err, st, leader.ID())
		}
		out, _, err := runKeelSplit(t, "quorum", "status", "--controllers", follower)
		return err == nil && strings.Contains(out, fmt.Sprintf("Active controller: %d\n", leader.ID())), fmt.Sprint(err, out)
	})
}

func TestQuorumStatus_Replication(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	c.WaitForActive(10 * time.Second)

	// Every voter has answered the leader, and holds its last entry, within
	// a few heartbeats.
	var st quorumStatus
	poll.UntilState(t, 10*time.Second, "every voter caught up, as the leader sees it", func() (bool, string) {
		var err error
		st, err = statusJSON(t, "--controllers", strings.Join(c.Addrs(), ","), "--replication")
		if err != nil {
			return false, err.Error()
		}
		done := st.LeaderID >= 0 && st.LeaderKnownBy == st.LeaderID
		for _, v := range st.Voters {
			r := v.Replication
			done = done && r != nil && r.LastContactMS >= 0 && r.LastContactMS < 5000 && r.Lag == 0 && r.MatchIndex > 0
		}
		b, _ := json.Marshal(st)
		return done, string(b)
	})

	// A voter cut off from the others falls behind, and the leader says
	// since when it has not heard from it. (The leader now: under load it
	// may have moved since the start.)
	leader := c.WaitForActive(10 * time.Second)
	var cut int32
	for _, n := range c.Nodes() {
		if n.ID() != leader.ID() {
			cut = n.ID()
			break
		}
	}
	c.Partition(cut)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().AppendNoOp(ctx, "after the cut"); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, fmt.Sprintf("voter %d behind, not heard from", cut), func() (bool, string) {
		var err error
		st, err = statusJSON(t, "--controllers", strings.Join(c.Addrs(), ","), "--replication")
		if err != nil {
			return false, err.Error()
		}
		for _, v := range st.Voters {
			if v.ID == cut && st.LeaderID != cut {
				// Not heard from for a while, or never by this leader:
				// under load leadership may move after the cut, and the
				// new leader has never had an answer from the cut voter.
				r := v.Replication
				return r != nil && r.Lag > 0 && (r.LastContactMS >= 200 || r.LastContactMS < 0), fmt.Sprintf("%+v", r)
			}
		}
		return false, "no voter " + fmt.Sprint(cut)
	})
	out, _, err := runKeelSplit(t, "quorum", "status", "--controllers", strings.Join(c.Addrs(), ","), "--replication")
	if err != nil || !strings.Contains(out, "MATCH INDEX") || !strings.Contains(out, "LAG") || !strings.Contains(out, " ago") {
		t.Fatalf("quorum status --replication: %v\n%s", err, out)
	}
	c.Heal()
}

func TestQuorumStatus_NoActiveControllerExits1(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	leader := c.WaitForActive(10 * time.Second)
	var lone int32
	for _, n := range c.Nodes() {
		if n.ID() != leader.ID() {
			lone = n.ID()
		}
	}
	c.Partition(lone)
	addr := c.Node(lone).Addr()
	// The lone node still names the leader until its heartbeat times out.
	poll.Until(t, 10*time.Second, "the cut-off node to know no leader", func() bool {
		id, _ := c.Node(lone).Controller().Leader()
		return id < 0
	})
	// The client reaches every node: only the lone one must be asked.
	// The lone node names the others as voters, and they do answer: the
	// active controller (one of them) is found through them.
	// (Polled: under load the two others may be between elections.)
	var st quorumStatus
	poll.UntilState(t, 10*time.Second, "status via the cut-off node to name one of the others as active", func() (bool, string) {
		var err error
		st, err = statusJSON(t, "--controllers", addr, "--timeout", "3s")
		return err == nil && st.LeaderID >= 0 && st.LeaderID != lone, fmt.Sprintf("%v, leader %d", err, st.LeaderID)
	})

	// With the others gone there is no active controller: the status is
	// printed, and the command fails.
	for _, n := range c.Nodes() {
		if n.ID() != lone {
			c.Kill(n.ID())
		}
	}
	out, _, err := runKeelSplit(t, "quorum", "status", "--controllers", addr, "--timeout", "3s")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no active controller") ||
		!strings.Contains(out, "Active controller: none") || !strings.Contains(out, "unreachable") {
		t.Fatalf("quorum status with no quorum: %v\n%s", err, out)
	}
	st, err = statusJSON(t, "--controllers", addr, "--timeout", "3s")
	if err == nil || st.LeaderID != -1 {
		t.Fatalf("quorum status -o json with no quorum: %v, leader_id %d; want an error and -1", err, st.LeaderID)
	}
}

// After a membership change, with no write since, every voter's applied
// index reaches the commit index: the rolling-restart recipe waits for it.
func TestQuorumStatus_AppliedReachesCommitAfterMembershipChange(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	c.WaitForActive(10 * time.Second)
	joiner := c.StartJoiner(4)
	addrs := strings.Join(c.Addrs(), ",")
	// A retry of a change that did commit succeeds: on a loaded machine a
	// 50 ms lease can cost the first attempt its leader.
	poll.UntilState(t, 30*time.Second, "add-voter 4 to succeed", func() (bool, string) {
		out, err := runKeel(t, "quorum", "add-voter", "4", joiner.Addr(), "--controllers", addrs)
		return err == nil, fmt.Sprint(err, out)
	})
	caughtUp := func(n int) func() (bool, string) {
		return func() (bool, string) {
			st, err := statusJSON(t, "--controllers", addrs)
			if err != nil {
				return false, err.Error()
			}
			done := len(st.Voters) == n
			for _, v := range st.Voters {
				done = done && v.AppliedIndex == st.CommitIndex && v.LastIndex == st.CommitIndex
			}
			b, _ := json.Marshal(st)
			return done, string(b)
		}
	}
	poll.UntilState(t, 10*time.Second, "applied = commit on 4 voters after add-voter", caughtUp(4))
	if out, err := runKeel(t, "quorum", "remove-voter", "4", "--controllers", addrs); err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("remove-voter: %v\n%s", err, out)
	}
	poll.UntilState(t, 10*time.Second, "applied = commit on 3 voters after remove-voter", caughtUp(3))
}

// The lines under quorum status's table: the voters that do not act on
// their image, and what the active controller's latest comparison of the
// digests found when it was not all agreement.
func TestQuorumStatus_ImageLines(t *testing.T) {
	voters := func(vs ...voterStatus) []voterStatus { return vs }
	tests := []struct {
		name string
		st   quorumStatus
		want []string
	}{
		{
			name: "all agree",
			st: quorumStatus{Voters: voters(voterStatus{ID: 1, Image: "agrees"}, voterStatus{ID: 2, Image: "agrees"}),
				ImageCheck: &imageCheckStatus{Index: 40, AgeMS: 1200}},
		},
		{
			name: "one diverged and differing",
			st: quorumStatus{
				Voters: voters(voterStatus{ID: 1, Image: "agrees"}, voterStatus{ID: 2, Image: "agrees"},
					voterStatus{ID: 3, Image: "differs", Diverged: &divergedStatus{Index: 31, Reason: "its state machine refused committed entry 31 (term 2)"}}),
				ImageCheck: &imageCheckStatus{Index: 40, AgeMS: 1200},
			},
			want: []string{
				"Controller 3 does not act on its image (diverged at index 31): its state machine refused committed entry 31 (term 2)",
				"Image digests at index 40 (1.2s ago): controller 3 differs, a majority holds another",
			},
		},
		{
			name: "no majority, one unknown",
			st: quorumStatus{
				Voters: voters(voterStatus{ID: 1, Image: "differs"}, voterStatus{ID: 2, Image: "differs"},
					voterStatus{ID: 3, Image: "unknown", ImageDetail: "did not answer"}),
				ImageCheck: &imageCheckStatus{Index: 40, AgeMS: 5, NoMajority: true},
			},
			want: []string{
				"Image digests at index 40 (5ms ago): controllers 1, 2 differ, and no majority holds one digest",
				"Image digests at index 40 (5ms ago): not compared with 3 (did not answer)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printImageStatus(&b, tt.st)
			got := strings.Fields(strings.TrimSpace(b.String()))
			want := strings.Fields(strings.Join(tt.want, "\n"))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestQuorumStatus_LoadingSnapshot: a voter restoring its snapshot shows
// how far, where its applied index goes, and never an index of 0.
func TestQuorumStatus_LoadingSnapshot(t *testing.T) {
	st := quorumStatus{LeaderID: 1, LeaderKnownBy: 1, Voters: []voterStatus{
		{ID: 1, Address: "a:1", State: "leader", LastIndex: 90, AppliedIndex: 90},
		{ID: 2, Address: "b:1", State: "starting", LoadingSnapshot: &snapshotLoadStatus{ReadBytes: 42, SizeBytes: 100, Percent: 42}},
	}}
	var b bytes.Buffer
	if err := printQuorumStatus(&b, st, false); err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "2 ") {
			row = strings.Join(strings.Fields(line), " ")
		}
	}
	if want := "2 b:1 starting - loading snapshot (42%)"; row != want {
		t.Errorf("row %q, want %q:\n%s", row, want, b.String())
	}
}
