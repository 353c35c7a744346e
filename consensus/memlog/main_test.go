package memlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/internal/poll"
	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait in these tests: generous, since nothing here
// waits on a timer, only on goroutines being scheduled.
const waitFor = 10 * time.Second

// recorder is a state machine that keeps what it applied and answers each
// entry with its index.
type recorder struct {
	mu       sync.Mutex
	applied  []applied
	restored [][]byte
}

type applied struct {
	index, term uint64
	data        string
}

func (r *recorder) ApplyEntry(index, term uint64, data []byte) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, applied{index, term, string(data)})
	return fmt.Sprintf("applied %d", index)
}

func (r *recorder) Snapshot() (func(io.Writer) error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.applied)
	return func(w io.Writer) error { _, err := fmt.Fprint(w, n); return err }, nil
}

func (r *recorder) Restore(rd io.Reader) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	if string(b) == "bad" {
		return errors.New("a bad snapshot")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = nil
	r.restored = append(r.restored, b)
	return nil
}

// data is what r applied, in order.
func (r *recorder) data() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []string
	for _, a := range r.applied {
		d = append(d, a.data)
	}
	return d
}

// testCluster is a cluster of voters whose state machines are recorders,
// closed when the test ends.
type testCluster struct {
	*Cluster
	sms map[int32]*recorder
	mu  sync.Mutex
}

func newTestCluster(t *testing.T, voters []int32, opts ...Option) *testCluster {
	t.Helper()
	tc := &testCluster{sms: make(map[int32]*recorder)}
	tc.Cluster = NewCluster(voters, func(id int32) consensus.StateMachine {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		r := &recorder{}
		tc.sms[id] = r
		return r
	}, opts...)
	t.Cleanup(tc.Close)
	return tc
}

func (tc *testCluster) sm(id int32) *recorder {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.sms[id]
}

// elected elects id and waits until it has seen true.
func (tc *testCluster) elected(t *testing.T, id int32) {
	t.Helper()
	if err := tc.Elect(id); err != nil {
		t.Fatal(err)
	}
	expectChanges(t, tc.Node(id), true)
}

// expectChanges reads want from n's LeadershipChanges, in order.
func expectChanges(t *testing.T, n *Node, want ...bool) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-n.LeadershipChanges():
			if got != w {
				t.Fatalf("node %d: change %d is %v, want %v", n.id, i, got, w)
			}
		case <-time.After(waitFor):
			t.Fatalf("node %d: change %d (%v) never came", n.id, i, w)
		}
	}
}

// expectNoChange checks n has no leadership change waiting, once every
// queued one would have been delivered.
func expectNoChange(t *testing.T, n *Node) {
	t.Helper()
	poll.Until(t, waitFor, "the notifier to drain", func() bool {
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		return len(n.queue) == 0
	})
	select {
	case got := <-n.LeadershipChanges():
		t.Fatalf("node %d: unexpected change %v", n.id, got)
	default:
	}
}

// mustApply applies data on n and waits for it, returning the future.
func mustApply(t *testing.T, n *Node, data string) consensus.ApplyFuture {
	t.Helper()
	f := n.Apply([]byte(data), time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("apply %q on %d: %v", data, n.id, err)
	}
	return f
}

// appliedData waits until id's state machine holds want.
func (tc *testCluster) appliedData(t *testing.T, id int32, want ...string) {
	t.Helper()
	poll.UntilState(t, waitFor, fmt.Sprintf("node %d to apply %q", id, want), func() (bool, string) {
		got := tc.sm(id).data()
		return slices.Equal(got, want), fmt.Sprintf("%q", got)
	})
}

// resolved reports whether f has completed, without waiting.
func resolved(f consensus.Future) bool {
	select {
	case <-f.(*future).done:
		return true
	default:
		return false
	}
}

// stateMachineData makes a recorder's Restore input.
func stateMachineData(s string) io.Reader { return bytes.NewReader([]byte(s)) }
