package integration

// The consumer-group side of the harness (issue 30): a cluster whose
// brokers serve groups without Kafka's initial rebalance delay, group
// members run as child processes (the test binary itself, switched by
// groupMemberEnv) so that a test can kill one with kill -9, and the
// coordinator's view of a group (DescribeGroups, OffsetFetch).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

const (
	// groupMemberEnv, set, makes the test binary a group member
	// (runGroupMember) instead of running tests; its value is the
	// member's groupMemberSpec in JSON.
	groupMemberEnv = "KEEL_TEST_GROUP_MEMBER"

	// groupSession is the members' session timeout: Kafka's
	// group.min.session.timeout.ms (6 s), the shortest a broker with
	// Keel's defaults accepts.
	groupSession = 6 * time.Second

	// groupHeartbeat is the members' heartbeat interval: a rebalance
	// reaches a member within it.
	groupHeartbeat = 500 * time.Millisecond

	// groupTimeout bounds a wait on a group: a session to run out, the
	// __consumer_offsets topic created and led, a rebalance, a new
	// coordinator loading the group.
	groupTimeout = 90 * time.Second
)

// startGroupCluster is startKafkaCluster (3 controllers, the brokers
// ids) with groupBrokerFlags (groups_test.go) given to every broker.
func startGroupCluster(t *testing.T, ids []int32) (*Cluster, map[int32]string) {
	t.Helper()
	return startKafkaClusterWith(t, ids, groupBrokerFlags)
}

// createLedTopic creates topic with CreateTopics through the brokers and
// waits until every partition is led with a full ISR.
func createLedTopic(t *testing.T, c *Cluster, kafka map[int32]string, topic string, partitions int32) {
	t.Helper()
	createTopicThroughBrokers(t, kafka, topic, partitions, 3, nil)
	c.WaitForTopic(t, topic, "every partition led with a full ISR", func(d topicJSON) bool {
		return len(d.Partitions) == int(partitions) && d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
}

// ---------------------------------------------------------------------------
// The coordinator's view

// groupAssignment is a group as DescribeGroups answers it: its state and
// each member's partitions of one topic, by member id.
type groupAssignment struct {
	state   string
	members map[string][]int32
	clients map[string]string // by member id: its client id and host, "ID@HOST"
}

func (g groupAssignment) String() string {
	ids := slices.Sorted(maps.Keys(g.members))
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", g.state)
	for _, id := range ids {
		fmt.Fprintf(&b, " %s=%v", id, g.members[id])
	}
	return b.String()
}

// clientsAre returns the members whose client, as the coordinator
// describes it, is not clientID at /127.0.0.1, or whose member id does
// not start with clientID, as Kafka's do.
func (g groupAssignment) clientsAre(clientID string) []string {
	var bad []string
	for id, client := range g.clients {
		if client != clientID+"@/127.0.0.1" || !strings.HasPrefix(id, clientID+"-") {
			bad = append(bad, fmt.Sprintf("member %s: client %s", id, client))
		}
	}
	slices.Sort(bad)
	return bad
}

// split reports whether the group is stable with n members, each with
// at least one partition, no partition twice, and all of 0..partitions-1
// assigned.
func (g groupAssignment) split(n int, partitions int32) bool {
	if g.state != "Stable" || len(g.members) != n {
		return false
	}
	seen := map[int32]bool{}
	for _, ps := range g.members {
		if len(ps) == 0 {
			return false
		}
		for _, p := range ps {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == int(partitions)
}

// coordinatorRequest sends req to the broker that FindCoordinator names
// as group's coordinator now, not to one the client cached: franz-go
// keeps sending a group's requests to a coordinator it cached after that
// broker died (a refused dial does not clear it).
func coordinatorRequest(cl *kgo.Client, group string, req kmsg.Request) (kmsg.Response, error) {
	id, err := groupCoordinator(cl, group)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Broker(int(id)).Request(ctx, req)
}

// groupCoordinator asks a broker which broker coordinates group, once.
func groupCoordinator(cl *kgo.Client, group string) (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	code, id := resp.ErrorCode, resp.NodeID
	if len(resp.Coordinators) == 1 {
		code, id = resp.Coordinators[0].ErrorCode, resp.Coordinators[0].NodeID
	}
	return id, kerr.ErrorForCode(code)
}

// describeGroup asks the group's coordinator for the group, once.
func describeGroup(cl *kgo.Client, group, topic string) (groupAssignment, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	r, err := coordinatorRequest(cl, group, req)
	if err != nil {
		return groupAssignment{}, err
	}
	resp := r.(*kmsg.DescribeGroupsResponse)
	if len(resp.Groups) != 1 {
		return groupAssignment{}, fmt.Errorf("DescribeGroups answered %d groups", len(resp.Groups))
	}
	d := resp.Groups[0]
	if err := kerr.ErrorForCode(d.ErrorCode); err != nil {
		return groupAssignment{}, err
	}
	g := groupAssignment{state: d.State, members: map[string][]int32{}, clients: map[string]string{}}
	for _, m := range d.Members {
		g.clients[m.MemberID] = m.ClientID + "@" + m.ClientHost
		var ps []int32
		var a kmsg.ConsumerMemberAssignment
		if len(m.MemberAssignment) > 0 {
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return groupAssignment{}, fmt.Errorf("member %s's assignment: %v", m.MemberID, err)
			}
		}
		for _, at := range a.Topics {
			if at.Topic == topic {
				ps = append(ps, at.Partitions...)
			}
		}
		slices.Sort(ps)
		g.members[m.MemberID] = ps
	}
	return g, nil
}

// waitForGroup polls DescribeGroups until cond holds of the group, and
// returns the group as it then was.
func waitForGroup(t *testing.T, cl *kgo.Client, group, topic, what string, cond func(groupAssignment) bool) groupAssignment {
	t.Helper()
	var g groupAssignment
	poll.UntilState(t, groupTimeout, fmt.Sprintf("group %s: %s", group, what), func() (bool, string) {
		var err error
		if g, err = describeGroup(cl, group, topic); err != nil {
			return false, err.Error()
		}
		return cond(g), g.String()
	})
	return g
}

// fetchCommitted fetches the group's committed offsets of topic from its
// coordinator, once.
func fetchCommitted(cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group}}
	r, err := coordinatorRequest(cl, group, req)
	if err != nil {
		return nil, err
	}
	resp := r.(*kmsg.OffsetFetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	// v8 and later answer per group, earlier versions at the top.
	type offset struct {
		topic     string
		partition int32
		offset    int64
		code      int16
	}
	var offsets []offset
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			offsets = append(offsets, offset{rt.Topic, p.Partition, p.Offset, p.ErrorCode})
		}
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, err
		}
		for _, rt := range g.Topics {
			for _, p := range rt.Partitions {
				offsets = append(offsets, offset{rt.Topic, p.Partition, p.Offset, p.ErrorCode})
			}
		}
	}
	out := map[int32]int64{}
	for _, o := range offsets {
		if err := kerr.ErrorForCode(o.code); err != nil {
			return nil, fmt.Errorf("%s/%d: %v", o.topic, o.partition, err)
		}
		if o.topic == topic && o.offset >= 0 {
			out[o.partition] = o.offset
		}
	}
	return out, nil
}

// waitForCommitted polls the group's committed offsets until they equal
// hw, every partition's high watermark.
func waitForCommitted(t *testing.T, cl *kgo.Client, group, topic string, hw map[int32]int64) {
	t.Helper()
	poll.UntilState(t, groupTimeout, fmt.Sprintf("group %s committed the high watermarks %v", group, hw), func() (bool, string) {
		got, err := fetchCommitted(cl, group, topic)
		if err != nil {
			return false, err.Error()
		}
		for p, end := range hw {
			if got[p] != end {
				return false, fmt.Sprintf("committed %v", got)
			}
		}
		return true, ""
	})
}

// ---------------------------------------------------------------------------
// Group members in child processes

// groupMemberSpec is what a child group member runs.
type groupMemberSpec struct {
	Seeds     []string      `json:"seeds"`
	Group     string        `json:"group"`
	Topic     string        `json:"topic"`
	Session   time.Duration `json:"session"`
	Heartbeat time.Duration `json:"heartbeat"`
}

// memberLine is one JSON line a child member prints: "assigned",
// "revoked" and "lost" with the partitions of the callback and the
// member's id; "record" with a record it read (and marked for commit
// only after printing it, so that a record committed was reported);
// "error" with a fetch error; "closed" once it has left the group.
type memberLine struct {
	Op         string  `json:"op"`
	MemberID   string  `json:"member_id,omitempty"`
	Partitions []int32 `json:"partitions,omitempty"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Value      string  `json:"value,omitempty"`
	Error      string  `json:"error,omitempty"`
	// "committed" (testdata/groups.py): the offsets the coordinator
	// answered; "closed": how long the client's close took.
	Offsets map[int32]int64 `json:"offsets,omitempty"`
	Seconds float64         `json:"seconds,omitempty"`
	// A line without op is a record as `kcat -J` prints it.
	Payload *string `json:"payload,omitempty"`
}

// runGroupMember is a child member: a franz-go group consumer (its
// default cooperative-sticky balancer) that prints what it is assigned
// and what it reads, commits what it printed every 200 ms and on
// revocation, and on SIGTERM leaves the group and exits 0.
func runGroupMember(specJSON string) int {
	var s groupMemberSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", groupMemberEnv, err)
		return 2
	}
	var outMu sync.Mutex
	say := func(l memberLine) {
		b, _ := json.Marshal(l)
		outMu.Lock()
		defer outMu.Unlock()
		// One write per line, unbuffered: a line the parent reads was
		// printed before the record was marked.
		_, _ = os.Stdout.Write(append(b, '\n'))
	}
	callback := func(op string) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if op != "assigned" {
				// The commit the default OnPartitionsRevoked does.
				_ = cl.CommitMarkedOffsets(ctx)
			}
			id, _ := cl.GroupMetadata()
			say(memberLine{Op: op, MemberID: id, Partitions: m[s.Topic]})
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Seeds...), kgo.ConsumerGroup(s.Group), kgo.ConsumeTopics(s.Topic),
		kgo.SessionTimeout(s.Session), kgo.HeartbeatInterval(s.Heartbeat),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.OnPartitionsAssigned(callback("assigned")), kgo.OnPartitionsRevoked(callback("revoked")), kgo.OnPartitionsLost(callback("lost")))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgo.NewClient: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, p int32, err error) {
			if ctx.Err() == nil {
				say(memberLine{Op: "error", Partition: p, Error: err.Error()})
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			say(memberLine{Op: "record", Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			cl.MarkCommitRecords(r)
		})
	}
	// Close leaves the group; the revocation it runs commits what was
	// marked.
	start := time.Now()
	cl.Close()
	say(memberLine{Op: "closed", Seconds: time.Since(start).Seconds()})
	return 0
}

// groupMember is a child member as its parent sees it.
type groupMember struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // commands, for testdata/groups.py
	stderr syncBuffer
	exited chan error

	mu       sync.Mutex
	memberID string
	owned    map[int32]bool // by its callbacks: assigned adds, revoked and lost remove
	read     map[string]int // value -> times read
	records  int
	errors   []string
	closing  time.Duration     // how long its close took, as it says
	commits  []map[int32]int64 // each "committed" answer
}

// startGroupMember starts a child member named name of group, reading
// topic from the brokers kafka with the given session timeout. It is
// killed at the end of the test, if still running.
func startGroupMember(t *testing.T, kafka map[int32]string, group, topic, name string, session time.Duration) *groupMember {
	t.Helper()
	spec, err := json.Marshal(groupMemberSpec{Seeds: bootstrap(kafka), Group: group, Topic: topic, Session: session, Heartbeat: groupHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), groupMemberEnv+"="+string(spec))
	return startMemberProcess(t, name, cmd)
}

// startMemberProcess starts cmd, a member that prints memberLines (a
// child Go member, or testdata/groups.py), and reads them as they come.
// It is killed at the end of the test, if still running.
func startMemberProcess(t *testing.T, name string, cmd *exec.Cmd) *groupMember {
	t.Helper()
	m := &groupMember{t: t, name: name, cmd: cmd, exited: make(chan error, 1), owned: map[int32]bool{}, read: map[string]int{}}
	m.cmd.Stderr = &m.stderr
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if m.stdin, err = m.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			m.handle(sc.Bytes())
		}
	}()
	go func() {
		<-lines // Wait closes stdout: read it all first
		m.exited <- m.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		err := <-m.exited
		m.exited <- err
		if t.Failed() {
			t.Logf("member %s exited: %v; errors it reported: %q\nstderr:\n%s", m.name, err, m.errorsSeen(), m.stderr.String())
		}
	})
	return m
}

func (m *groupMember) handle(line []byte) {
	var l memberLine
	if err := json.Unmarshal(line, &l); err != nil {
		l = memberLine{Op: "error", Error: fmt.Sprintf("unparsed line %q", line)}
	}
	if l.Op == "" && l.Payload != nil {
		l.Op, l.Value = "record", *l.Payload
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch l.Op {
	case "assigned", "revoked", "lost":
		m.memberID = l.MemberID
		for _, p := range l.Partitions {
			m.owned[p] = l.Op == "assigned"
		}
	case "record":
		m.read[l.Value]++
		m.records++
	case "error":
		m.errors = append(m.errors, l.Error)
	case "committed":
		m.commits = append(m.commits, l.Offsets)
	case "closed":
		m.closing = time.Duration(l.Seconds * float64(time.Second))
	}
}

// partitions returns the member's id and the partitions it owns, as its
// own callbacks said.
func (m *groupMember) partitions() (string, []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p, owned := range m.owned {
		if owned {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return m.memberID, ps
}

// reads returns how many times the member read each value, and how many
// records it read in all.
func (m *groupMember) reads() (map[string]int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.read), m.records
}

// kill sends SIGKILL to the member and waits for it to exit: it leaves
// no LeaveGroup behind, only its session to run out.
func (m *groupMember) kill() {
	m.t.Helper()
	if err := m.cmd.Process.Kill(); err != nil {
		m.t.Fatal(err)
	}
	err := <-m.exited
	m.exited <- err
}

// stop sends SIGTERM, and fails the test unless the member exited 0
// within limit (having closed its client: left the group).
func (m *groupMember) stop(limit time.Duration) {
	m.t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		m.t.Fatal(err)
	}
	select {
	case err := <-m.exited:
		m.exited <- err
		if err != nil {
			m.t.Fatalf("member %s after SIGTERM: %v\nstderr:\n%s", m.name, err, m.stderr.String())
		}
	case <-time.After(limit):
		m.t.Fatalf("member %s still running %s after SIGTERM\nstderr:\n%s", m.name, limit, m.stderr.String())
	}
}

// ownsAsDescribed reports whether the member's own view of its
// partitions is what the coordinator describes for its member id.
func (m *groupMember) ownsAsDescribed(g groupAssignment) bool {
	id, ps := m.partitions()
	want, ok := g.members[id]
	return ok && slices.Equal(ps, want)
}

// unread returns the values of acked no member of ms read.
func unread(acked []ackedRecord, ms ...*groupMember) []string {
	var missing []string
	reads := make([]map[string]int, len(ms))
	for i, m := range ms {
		reads[i], _ = m.reads()
	}
	for _, a := range acked {
		found := false
		for _, r := range reads {
			found = found || r[a.value] > 0
		}
		if !found {
			missing = append(missing, a.value)
		}
	}
	return missing
}

// waitAllRead polls until the members ms together have read every record
// of acked.
func waitAllRead(t *testing.T, acked []ackedRecord, ms ...*groupMember) {
	t.Helper()
	poll.UntilState(t, groupTimeout, fmt.Sprintf("every one of %d acknowledged records read by the group", len(acked)), func() (bool, string) {
		missing := unread(acked, ms...)
		if len(missing) > 5 {
			missing = append(missing[:5], "...")
		}
		return len(missing) == 0, fmt.Sprintf("unread: %v", missing)
	})
}

// send writes one command line to the member (testdata/groups.py).
func (m *groupMember) send(line string) {
	m.t.Helper()
	if _, err := io.WriteString(m.stdin, line+"\n"); err != nil {
		m.t.Fatalf("member %s: %v\nstderr:\n%s", m.name, err, m.stderr.String())
	}
}

// sameAssignments reports whether the members' own views of their
// partitions are, together, the assignment the coordinator describes
// (for clients that do not say their member id).
func sameAssignments(g groupAssignment, ms ...*groupMember) bool {
	var own, described []string
	for _, m := range ms {
		_, ps := m.partitions()
		own = append(own, fmt.Sprint(ps))
	}
	for _, ps := range g.members {
		described = append(described, fmt.Sprint(ps))
	}
	slices.Sort(own)
	slices.Sort(described)
	return slices.Equal(own, described)
}
