package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
)

func clusterIDRec(id string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: id}}}
}

func epochRec(e int64, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: e, LeaderId: leader}}}
}

func noOpRec() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

// dumpDataDir runs a one-node quorum on a temp data dir: two batches, a
// snapshot, more entries (a barrier, and one that is not a batch at all), then
// stops it.
// It returns the dir and the snapshot's index.
func dumpDataDir(t *testing.T) (string, uint64) {
	t.Helper()
	var snapIndex uint64
	dir := oneNodeDataDir(t, func(n *oneNode) {
		n.apply(n.batch(clusterIDRec("c1")))
		n.apply(n.batch(epochRec(1, 1), noOpRec()))
		snapIndex = n.snapshot()
		n.apply(n.batch(epochRec(2, 1)))
		if err := n.node.Raft.Barrier(5 * time.Second).Error(); err != nil {
			t.Fatalf("barrier: %v", err)
		}
		n.apply([]byte{0xee, 1, 2}) // not a batch: dump must report it and go on
		n.apply(n.batch(noOpRec()))
	})
	return dir, snapIndex
}

// oneNode is a running one-node quorum that a test writes entries to.
type oneNode struct {
	t    *testing.T
	node *raftlog.Node
}

func (n *oneNode) apply(data []byte) {
	n.t.Helper()
	if err := n.node.Raft.Apply(data, 5*time.Second).Error(); err != nil {
		n.t.Fatalf("apply: %v", err)
	}
}

func (n *oneNode) batch(recs ...*keelpb.Record) []byte {
	n.t.Helper()
	b, err := fsm.EncodeBatch(recs...)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// snapshot takes a raft snapshot and returns its index.
func (n *oneNode) snapshot() uint64 {
	n.t.Helper()
	if err := n.node.Raft.Snapshot().Error(); err != nil {
		n.t.Fatalf("snapshot: %v", err)
	}
	return n.node.Raft.LastIndex()
}

// oneNodeDataDir runs a one-node quorum on a temp data dir, lets write
// write to it, then stops it and returns the dir.
func oneNodeDataDir(t *testing.T, write func(n *oneNode)) string {
	t.Helper()
	dir := t.TempDir()
	mux, err := raftlog.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	node, err := raftlog.Open(raftlog.Config{
		NodeID:    1,
		Advertise: mux.Addr().String(),
		DataDir:   dir,
		Voters:    []raftlog.Voter{{ID: 1, Address: mux.Addr().String()}},
		Timing: raftlog.Timing{
			HeartbeatTimeout:   50 * time.Millisecond,
			ElectionTimeout:    50 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			CommitTimeout:      5 * time.Millisecond,
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, fsm.New(), mux)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	poll.Until(t, 10*time.Second, "the one node to lead", func() bool { return node.Raft.State() == raft.Leader })
	write(&oneNode{t: t, node: node})
	return dir
}

func runDump(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"metadata", "dump"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func parseLines(t *testing.T, s string) []dumpLine {
	t.Helper()
	var lines []dumpLine
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var d dumpLine
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, d)
	}
	return lines
}

func TestMetadataDump(t *testing.T) {
	dir, snapIndex := dumpDataDir(t)

	t.Run("json", func(t *testing.T) {
		out, errOut, err := runDump(t, "--data-dir", dir, "-o", "json")
		if err == nil {
			t.Errorf("dump of a log with a bad entry succeeded; want an error at the end")
		}
		if !strings.Contains(errOut, "unknown entry format 238") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("stderr = %q, want one line about the bad entry", errOut)
		}
		lines := parseLines(t, out)
		var got []string
		var prev uint64
		for _, l := range lines {
			got = append(got, l.Source+":"+l.Type)
			if l.Index < prev {
				t.Errorf("index %d after %d", l.Index, prev)
			}
			prev = l.Index
			if l.Source == "snapshot" && l.Index != snapIndex {
				t.Errorf("snapshot line index = %d, want %d", l.Index, snapIndex)
			}
			if l.Source == "log" && l.Index <= snapIndex {
				t.Errorf("log line at %d is at or below the snapshot (%d)", l.Index, snapIndex)
			}
			if l.Term == 0 {
				t.Errorf("line %+v has no term", l)
			}
		}
		want := []string{
			"snapshot:cluster_id", "snapshot:controller_epoch",
			"log:controller_epoch", "log:raft_barrier", "log:no_op",
		}
		if !slices.Equal(got, want) {
			t.Errorf("dump = %q, want %q", got, want)
		}
		if string(lines[1].Record) != `{"epoch":1,"leader_id":1}` {
			t.Errorf("snapshot epoch record = %s, want snake_case names and numbers as numbers", lines[1].Record)
		}
	})

	t.Run("text", func(t *testing.T) {
		out, _, _ := runDump(t, "--data-dir", dir, "--type", "cluster_id")
		fields := strings.Fields(strings.TrimSpace(out))
		if len(fields) != 4 || fields[2] != "cluster_id" || fields[3] != `{"cluster_id":"c1"}` {
			t.Errorf("text dump = %q, want one line INDEX TERM cluster_id {json}", out)
		}
	})

	t.Run("type filter", func(t *testing.T) {
		out, _, _ := runDump(t, "--data-dir", dir, "-o", "json", "--type", "controller_epoch,no_op")
		var got []string
		for _, l := range parseLines(t, out) {
			got = append(got, l.Source+":"+l.Type)
		}
		want := []string{"snapshot:controller_epoch", "log:controller_epoch", "log:no_op"}
		if !slices.Equal(got, want) {
			t.Errorf("dump = %q, want %q", got, want)
		}
	})

	t.Run("from index past the snapshot", func(t *testing.T) {
		out, _, err := runDump(t, "--data-dir", dir, "-o", "json", "--from-index", "99999")
		if err != nil || out != "" {
			t.Errorf("dump past the end = %q, %v; want nothing", out, err)
		}
		out, _, _ = runDump(t, "--data-dir", dir, "-o", "json", "--from-index", "1", "--type", "cluster_id")
		if got := parseLines(t, out); len(got) != 1 || got[0].Source != "snapshot" {
			t.Errorf("--from-index 1 = %+v, want the snapshot's cluster_id", got)
		}
	})

	t.Run("raft entries", func(t *testing.T) {
		out, _, _ := runDump(t, "--data-dir", dir, "-o", "json", "--type", "raft_barrier,raft_noop")
		lines := parseLines(t, out)
		if len(lines) != 1 || lines[0].Type != "raft_barrier" || lines[0].Source != "log" || lines[0].Record != nil {
			t.Errorf("raft entries = %+v, want the barrier after the snapshot, with no record", lines)
		}
	})

	t.Run("unknown type", func(t *testing.T) {
		_, _, err := runDump(t, "--data-dir", dir, "--type", "brokr")
		if err == nil || !strings.Contains(err.Error(), "valid types: ") || !strings.Contains(err.Error(), "broker_registration") {
			t.Errorf("unknown --type: err = %v, want the valid types listed", err)
		}
	})
}

func TestMetadataDump_CorruptSnapshot(t *testing.T) {
	dir, _ := dumpDataDir(t)
	states, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(states) != 1 {
		t.Fatalf("snapshot files = %q, want one", states)
	}
	b, err := os.ReadFile(states[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(states[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runDump(t, "--data-dir", dir, "-o", "json")
	if err == nil {
		t.Error("dump of a corrupt snapshot succeeded")
	}
	if !strings.Contains(errOut, "error: snapshot") {
		t.Errorf("stderr = %q, want a snapshot error line", errOut)
	}
	// The log after the snapshot is still dumped.
	var logLines int
	for _, l := range parseLines(t, out) {
		if l.Source == "log" {
			logLines++
		}
	}
	if logLines != 3 {
		t.Errorf("log lines after a corrupt snapshot = %d, want 3\n%s", logLines, out)
	}
}

func TestMetadataDump_NoDataDir(t *testing.T) {
	_, _, err := runDump(t, "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "has no raft.db") {
		t.Errorf("err = %v, want no raft.db", err)
	}
}

// A broker's data dir is named as one, not called corrupt.
func TestMetadataDump_BrokerDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"format":1,"broker_id":3,"cluster_id":"c1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runDump(t, "--data-dir", dir)
	want := "data dir " + dir + " is broker 3's (its meta.json names a broker_id), not a controller's"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "corrupt") {
		t.Errorf("err = %v, want %q", err, want)
	}
}

var (
	ordersID = fsm.TopicID{0x6f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	otherID  = fsm.TopicID{0x07, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

func brokerRec(id int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: fmt.Sprintf("inc-%d", id), Address: fmt.Sprintf("127.0.0.1:92%02d", id), Rack: "r1",
		MinMetadataVersion: 1, MaxMetadataVersion: 2}}}
}

func controllerRec(id int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: &keelpb.ControllerRegistrationRecord{
		NodeId: id, Address: fmt.Sprintf("127.0.0.1:91%02d", id), MinMetadataVersion: 1, MaxMetadataVersion: 2}}}
}

func topicRecord(name string, id fsm.TopicID, configs map[string]string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: name, TopicId: bytes.Clone(id[:]), Configs: configs}}}
}

func partitionRecord(id fsm.TopicID, p int32, replicas, isr []int32, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
		TopicId: bytes.Clone(id[:]), Partition: p, Replicas: replicas, Isr: isr, Leader: leader}}}
}

// topicsDataDir is a stopped controller's data dir at metadata.version 2
// with a controller's registration, two brokers and two topics in its
// snapshot, and in the log after it: an ISR change of orders/0 and the
// removal of "other".
func topicsDataDir(t *testing.T) string {
	t.Helper()
	return oneNodeDataDir(t, func(n *oneNode) {
		n.apply(n.batch(clusterIDRec("c1"), epochRec(1, 1),
			&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 2}}},
			controllerRec(1)))
		n.apply(n.batch(brokerRec(1), brokerRec(2)))
		n.apply(n.batch(topicRecord("orders", ordersID, map[string]string{"unclean.leader.election.enable": "true"}),
			partitionRecord(ordersID, 0, []int32{1, 2}, []int32{1, 2}, 1),
			partitionRecord(ordersID, 1, []int32{2, 1}, []int32{2, 1}, 2)))
		n.apply(n.batch(topicRecord("other", otherID, nil), partitionRecord(otherID, 0, []int32{2}, []int32{2}, 2)))
		n.snapshot()
		n.apply(n.batch(&keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
			TopicId: bytes.Clone(ordersID[:]), Partition: 0, Isr: &keelpb.Int32List{Values: []int32{1}}}}}))
		n.apply(n.batch(&keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: bytes.Clone(otherID[:])}}}))
	})
}

func TestMetadataDump_ReadableJSONAndTopicFilter(t *testing.T) {
	dir := topicsDataDir(t)
	out, errOut, err := runDump(t, "--data-dir", dir, "-o", "json", "--topic", "orders")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var got []string
	for _, l := range parseLines(t, out) {
		got = append(got, l.Source+":"+l.Type+" "+string(l.Record))
	}
	want := []string{
		`snapshot:topic {"name":"orders","topic_id":"` + ordersID.String() + `","configs":{"unclean.leader.election.enable":"true"}}`,
		// Partition 0 and epoch 0 are there: zero values are values.
		`snapshot:partition {"topic_id":"` + ordersID.String() + `","partition":0,"replicas":[1,2],"isr":[1,2],"leader":1,"leader_epoch":0,"partition_epoch":0,"adding_replicas":[],"removing_replicas":[],"eligible_leader_replicas":[],"last_known_elr":[],"leader_recovery_state":"LEADER_RECOVERY_STATE_RECOVERED"}`,
		`snapshot:partition {"topic_id":"` + ordersID.String() + `","partition":1,"replicas":[2,1],"isr":[2,1],"leader":2,"leader_epoch":0,"partition_epoch":0,"adding_replicas":[],"removing_replicas":[],"eligible_leader_replicas":[],"last_known_elr":[],"leader_recovery_state":"LEADER_RECOVERY_STATE_RECOVERED"}`,
		// Unchanged fields of a change are absent, not zero.
		`log:partition_change {"topic_id":"` + ordersID.String() + `","partition":0,"isr":{"values":[1]}}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("dump --topic orders:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A topic id picks out a deleted topic's records, removal included.
	out, _, err = runDump(t, "--data-dir", dir, "--topic", otherID.String())
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "remove_topic") ||
		!strings.Contains(lines[0], `"name":"other"`) {
		t.Errorf("dump --topic %s:\n%s\nwant other's topic, partition and removal", otherID, out)
	}
	// The broker registration's 64-bit and zero fields are plain JSON.
	out, _, _ = runDump(t, "--data-dir", dir, "-o", "json", "--type", "broker_registration")
	if lines := parseLines(t, out); len(lines) != 2 || !strings.Contains(string(lines[0].Record), `"broker_id":1,`) {
		t.Errorf("broker registrations: %s", out)
	}
}

// runShell runs `keel metadata shell` with args and stdin.
func runShell(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{"metadata", "shell"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestMetadataShell(t *testing.T) {
	dir := topicsDataDir(t)

	t.Run("a command from the arguments", func(t *testing.T) {
		out, errOut, err := runShell(t, "", "--data-dir", dir, "ls", "/")
		if err != nil || out != "acls\nbrokers/\nclient_quotas/\nconfigs/\ncontrollers/\nquorum/\ntopics/\nusers/\n" || errOut != "" {
			t.Errorf("ls /: %q, stderr %q, %v", out, errOut, err)
		}
		// The log after the snapshot is replayed: other is gone, orders/0's ISR shrank.
		out, _, err = runShell(t, "", "--data-dir", dir, "ls", "/topics")
		if err != nil || out != "orders/\n" {
			t.Errorf("ls /topics: %q, %v; want orders alone (other was removed in the log)", out, err)
		}
		out, _, err = runShell(t, "", "--data-dir", dir, "cat", "/topics/orders/0")
		var p partitionRow
		if err != nil || json.Unmarshal([]byte(out), &p) != nil || !slices.Equal(p.ISR, []int32{1}) || p.Leader != 1 || p.PartitionEpoch != 1 {
			t.Errorf("cat /topics/orders/0: %q, %v; want ISR [1] after the log's change", out, err)
		}
	})

	t.Run("a script on stdin", func(t *testing.T) {
		script := "# a comment\ncd /topics/orders\npwd\nls\ncat id\ncd ../../brokers\nls\ncat 2\ncat /configs/topics/orders\ncat /quorum/cluster_id /quorum/controller_epoch\nexit\nls /\n"
		out, errOut, err := runShell(t, script, "--data-dir", dir)
		if err != nil || errOut != "" {
			t.Fatalf("script: %v, stderr %q", err, errOut)
		}
		for _, want := range []string{
			"/topics/orders\nconfigs\nid\n0\n1\n",
			`"` + ordersID.String() + `"`,
			"1\n2\n{\n",
			`"address": "127.0.0.1:9202"`,
			`"state": "fenced"`, // registered, never unfenced
			"\"name\": \"unclean.leader.election.enable\",\n    \"value\": \"true\",\n    \"source\": \"topic\"",
			"\"c1\"\n1\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("script output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "brokers/\nconfigs/") {
			t.Errorf("a command after exit ran:\n%s", out)
		}
	})

	t.Run("tree and find", func(t *testing.T) {
		out, _, err := runShell(t, "", "--data-dir", dir, "tree", "/topics")
		want := "/topics\n└── orders/\n    ├── configs\n    ├── id\n    ├── 0\n    └── 1\n"
		if err != nil || out != want {
			t.Errorf("tree /topics = %q, %v; want %q", out, err, want)
		}
		out, _, err = runShell(t, "", "--data-dir", dir, "find", "/brokers")
		if err != nil || out != "/brokers\n/brokers/1\n/brokers/2\n" {
			t.Errorf("find /brokers = %q, %v", out, err)
		}
		out, _, _ = runShell(t, "", "--data-dir", dir, "cat", "/configs/cluster")
		if !strings.Contains(out, `"name": "min.insync.replicas"`) {
			t.Errorf("cat /configs/cluster = %q; want every config's cluster-wide value", out)
		}
		out, _, err = runShell(t, "", "--data-dir", dir, "cat", "/controllers/1")
		var ctrl controllerFile
		if err != nil || json.Unmarshal([]byte(out), &ctrl) != nil ||
			ctrl != (controllerFile{ID: 1, Address: "127.0.0.1:9101", MinMetadataVersion: 1, MaxMetadataVersion: 2}) {
			t.Errorf("cat /controllers/1 = %q, %v; want controller 1's registration", out, err)
		}
		out, _, _ = runShell(t, "", "--data-dir", dir, "cat", "/quorum/voters")
		if !strings.Contains(out, `"suffrage": "voter"`) {
			t.Errorf("cat /quorum/voters = %q; want the raft configuration", out)
		}
	})

	t.Run("a snapshot file", func(t *testing.T) {
		st, err := loadDataDirImage(dir, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := fsm.WriteSnapshot(&buf, st.img); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "backup.snap")
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		fromFile, _, err := runShell(t, "", "--snapshot", file, "find", "/topics")
		fromDir, _, _ := runShell(t, "", "--data-dir", dir, "find", "/topics")
		if err != nil || fromFile != fromDir {
			t.Errorf("find /topics in the snapshot file = %q, %v; want the data dir's %q", fromFile, err, fromDir)
		}
		damaged := filepath.Join(t.TempDir(), "damaged.snap")
		if err := os.WriteFile(damaged, buf.Bytes()[:buf.Len()-7], 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err = runShell(t, "", "--snapshot", damaged, "ls")
		if err == nil || !strings.HasPrefix(err.Error(), damaged+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("a damaged snapshot file: err = %v, want one line naming it", err)
		}
	})

	t.Run("mistakes", func(t *testing.T) {
		for _, tc := range []struct {
			stdin   string
			args    []string
			wantErr string
		}{
			{"", []string{"ls"}, "give --data-dir DIR"},
			{"", []string{"--data-dir", dir, "--snapshot", "x", "ls"}, "give --data-dir DIR"},
			{"", []string{"--data-dir", dir, "cat", "/topics/nope"}, "cat: /topics/nope: no such file or directory\n"},
			{"", []string{"--data-dir", dir, "cat", "/topics"}, "cat: /topics: is a directory\n"},
			{"", []string{"--data-dir", dir, "cd", "/quorum/term"}, "cd: /quorum/term: not a directory\n"},
			{"", []string{"--data-dir", dir, "rm", "/topics"}, "rm: unknown command"},
			// A script goes on past a failure, and fails at the end.
			{"cat /nope\npwd\n", []string{"--data-dir", dir}, "cat: /nope: no such file or directory\n"},
		} {
			out, errOut, err := runShell(t, tc.stdin, tc.args...)
			if err == nil || !strings.Contains(errOut+err.Error(), tc.wantErr) {
				t.Errorf("shell %q <<< %q: out %q, stderr %q, err %v; want an error containing %q", tc.args, tc.stdin, out, errOut, err, tc.wantErr)
			}
			if tc.stdin != "" && out != "/\n" {
				t.Errorf("shell <<< %q: out %q; want the pwd after the failure to run", tc.stdin, out)
			}
		}
	})
}
