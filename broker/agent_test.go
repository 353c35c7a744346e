package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// startAgent starts broker 1 against c with fast heartbeats; mutate may
// change the config first. The agent is closed in t.Cleanup.
func startAgent(t *testing.T, c *fakeCluster, mutate func(*Config)) *Agent {
	t.Helper()
	cfg := Config{
		BrokerID:          1,
		Listen:            "127.0.0.1:0",
		DataDir:           t.TempDir(),
		Controllers:       c.addrs(),
		HeartbeatInterval: 20 * time.Millisecond,
		Logger:            testLogger(t),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// inSync holds once the agent is active, at the controllers' offset.
func inSync(a *Agent, c *fakeCluster) func() bool {
	return func() bool {
		st := a.Status()
		return st.State == StateActive && st.MetadataOffset == c.image().Offset
	}
}

func TestAgent_RegistersCatchesUpAndIsUnfenced(t *testing.T) {
	c := newFakeCluster(t, 1)
	a := startAgent(t, c, nil)
	poll.Until(t, waitTimeout, "the broker to be active and in sync", inSync(a, c))

	st := a.Status()
	regs := c.registrationCalls()
	if len(regs) != 1 {
		t.Fatalf("%d registrations, want 1", len(regs))
	}
	r := regs[0]
	if r.BrokerId != 1 || r.IncarnationId != st.IncarnationID || r.Address != a.Addr() || r.ClusterId != "" ||
		r.MinMetadataVersion != fsm.MinMetadataVersion || r.MaxMetadataVersion != fsm.MaxMetadataVersion {
		t.Fatalf("registration = %v (agent %+v)", r, st)
	}
	b, ok := a.Image().Broker(1)
	if !ok || b.Epoch != st.BrokerEpoch || b.Fenced || b.IncarnationID != st.IncarnationID {
		t.Fatalf("own registration in the image = %+v, status %+v", b, st)
	}
	if st.ClusterID != c.clusterID || st.ControllerID != 1 || st.ControllerEpoch != 1 {
		t.Fatalf("status = %+v", st)
	}
	if _, _, _, snaps := c.counts(); snaps != 1 {
		t.Fatalf("%d snapshots sent, want 1", snaps)
	}

	// The broker's own service reports the same view.
	bc, err := rpc.DialBroker(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	resp, err := bc.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if resp.BrokerId != 1 || resp.BrokerEpoch != st.BrokerEpoch || resp.ControllerId != 1 || resp.ControllerEpoch != 1 ||
		resp.MetadataOffset != c.image().Offset || resp.ClusterId != c.clusterID || resp.State != StateActive || len(resp.Partitions) != 0 {
		t.Fatalf("Inspect = %v", resp)
	}
}

func TestAgent_Sessions(t *testing.T) {
	tests := []struct {
		name string
		// act changes the controllers' view of broker 1, which is active at epoch.
		act func(t *testing.T, c *fakeCluster, epoch int64)
		// reregisters: the agent must register again, with a new epoch.
		reregisters bool
	}{
		{
			name: "stale epoch: another registration replaced this one",
			act: func(t *testing.T, c *fakeCluster, epoch int64) {
				c.append(registerRec(1, "someone-else"))
			},
			reregisters: true,
		},
		{
			name: "not registered: the registration was removed",
			act: func(t *testing.T, c *fakeCluster, epoch int64) {
				c.append(unregisterRec(1, epoch))
			},
			reregisters: true,
		},
		{
			name: "fenced, then unfenced, as the controller says",
			act: func(t *testing.T, c *fakeCluster, epoch int64) {
				c.setHoldFenced(true)
				c.append(fenceRec(1, epoch))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			a := startAgent(t, c, nil)
			poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
			epoch := a.Status().BrokerEpoch

			tt.act(t, c, epoch)
			if !tt.reregisters {
				poll.Until(t, waitTimeout, "the broker to be fenced", func() bool { return a.Status().State == StateFenced })
				// It stays fenced while the controller says so...
				_, hb, _, _ := c.counts()
				poll.Until(t, waitTimeout, "more heartbeats", func() bool { _, n, _, _ := c.counts(); return n >= hb+3 })
				if st := a.Status(); st.State != StateFenced || st.BrokerEpoch != epoch {
					t.Fatalf("status = %+v, want fenced at epoch %d", st, epoch)
				}
				// ...and is active again once it does not.
				c.setHoldFenced(false)
				poll.Until(t, waitTimeout, "the broker to be active again", inSync(a, c))
				if regs := c.registrationCalls(); len(regs) != 1 {
					t.Fatalf("%d registrations, want 1", len(regs))
				}
				return
			}

			poll.Until(t, waitTimeout, "a new registration", func() bool { return len(c.registrationCalls()) == 2 })
			poll.Until(t, waitTimeout, "the broker to be active again", func() bool {
				st := a.Status()
				return st.BrokerEpoch > epoch && inSync(a, c)()
			})
			st := a.Status()
			regs := c.registrationCalls()
			if regs[1].IncarnationId != regs[0].IncarnationId || regs[1].ClusterId != c.clusterID {
				t.Fatalf("second registration = %v, first %v", regs[1], regs[0])
			}
			if b, _ := c.image().Broker(1); b.Epoch != st.BrokerEpoch || b.IncarnationID != st.IncarnationID || b.Fenced {
				t.Fatalf("controllers' broker 1 = %+v, agent %+v", b, st)
			}
			// The new session's stream carries the new epoch and resumes from
			// the broker's offset: one snapshot in all.
			calls := c.streamCalls()
			last := calls[len(calls)-1].req
			if last.BrokerEpoch != st.BrokerEpoch || last.FromOffset == 0 {
				t.Fatalf("last stream request = %v", last)
			}
			if _, _, _, snaps := c.counts(); snaps != 1 {
				t.Fatalf("%d snapshots sent, want 1", snaps)
			}
		})
	}
}

func TestAgent_FollowsLeaderHints(t *testing.T) {
	c := newFakeCluster(t, 2)
	c.failover(1) // node 2 is active; the broker knows only node 1
	a := startAgent(t, c, func(cfg *Config) { cfg.Controllers = c.addrs()[:1] })
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))

	st := a.Status()
	if st.ControllerID != 2 || st.ControllerEpoch != 2 {
		t.Fatalf("status = %+v, want controller 2 at epoch 2", st)
	}
	for _, call := range c.streamCalls() {
		if call.node == 2 {
			return
		}
	}
	t.Fatalf("no stream reached node 2: %v", c.streamCalls())
}

func TestAgent_ResumesAfterFailoverWithoutSnapshot(t *testing.T) {
	c := newFakeCluster(t, 3)
	a := startAgent(t, c, nil)
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	before := a.Status().MetadataOffset

	c.failover(2)
	c.append(noOpRec())
	poll.Until(t, waitTimeout, "the broker to follow controller 3", func() bool {
		st := a.Status()
		return st.ControllerID == 3 && st.ControllerEpoch == 2 && st.MetadataOffset == c.image().Offset
	})
	if _, _, _, snaps := c.counts(); snaps != 1 {
		t.Fatalf("%d snapshots sent, want only the first", snaps)
	}
	for _, call := range c.streamCalls() {
		if call.node == 3 && call.req.FromOffset < before {
			t.Fatalf("stream to the new controller from offset %d, broker had %d", call.req.FromOffset, before)
		}
	}
	if !inSync(a, c)() {
		t.Fatalf("status %+v, controllers at %d", a.Status(), c.image().Offset)
	}
}

func TestAgent_ReconnectsAStreamStuckOnADeposedController(t *testing.T) {
	c := newFakeCluster(t, 2)
	a := startAgent(t, c, nil)
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))

	// Node 1 is cut off: its stream neither ends nor sends. Only the
	// heartbeats, answered by node 2 at epoch 2, show the broker it is behind.
	c.mu.Lock()
	c.partitioned = true
	c.mu.Unlock()
	c.failover(1)
	poll.Until(t, waitTimeout, "the broker to follow controller 2", func() bool {
		st := a.Status()
		return st.ControllerID == 2 && st.ControllerEpoch == 2 && inSync(a, c)()
	})
}

func TestAgent_RefusesAnotherCluster(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, c *fakeCluster, dataDir string)
	}{
		{
			name: "registration refused for the stored cluster id",
			setup: func(t *testing.T, c *fakeCluster, dataDir string) {
				m, err := openMeta(dataDir, 1)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.learnClusterID("other-cluster", "test"); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "the stream's snapshot is of another cluster",
			setup: func(t *testing.T, c *fakeCluster, dataDir string) {
				c.snapshotClusterID = "other-cluster"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			dir := t.TempDir()
			tt.setup(t, c, dir)
			var seen []string
			var mu sync.Mutex
			a := startAgent(t, c, func(cfg *Config) {
				cfg.DataDir = dir
				cfg.Handler = handlerFunc(func(_, after *fsm.Image) {
					mu.Lock()
					seen = append(seen, after.ClusterID)
					mu.Unlock()
				})
			})
			select {
			case err := <-a.Fatal():
				if !errors.Is(err, ErrClusterMismatch) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("fatal error %q, want one line wrapping ErrClusterMismatch", err)
				}
				t.Log(err)
			case <-time.After(10 * time.Second):
				t.Fatal("no fatal error")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range seen {
				if id == "other-cluster" {
					t.Fatal("the handler was given another cluster's image")
				}
			}
		})
	}
}

func TestAgent_KeepsClusterIDAcrossRestarts(t *testing.T) {
	c := newFakeCluster(t, 1)
	dir := t.TempDir()
	a := startAgent(t, c, func(cfg *Config) { cfg.DataDir = dir })
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	first := a.Status().IncarnationID
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, metaFileName))
	if err != nil || !strings.Contains(string(data), `"cluster_id":"test-cluster"`) {
		t.Fatalf("meta.json = %s, %v", data, err)
	}

	// The restarted broker is a new incarnation, and says which cluster it
	// belongs to in every registration and stream.
	a = startAgent(t, c, func(cfg *Config) { cfg.DataDir = dir })
	poll.Until(t, waitTimeout, "the restarted broker to be active", func() bool { return a.Status().IncarnationID != first && inSync(a, c)() })
	regs := c.registrationCalls()
	if last := regs[len(regs)-1]; last.ClusterId != "test-cluster" || last.IncarnationId == first {
		t.Fatalf("registration after restart = %v", last)
	}
	calls := c.streamCalls()
	if last := calls[len(calls)-1].req; last.ClusterId != "test-cluster" {
		t.Fatalf("stream after restart = %v", last)
	}
}

// A controlled shutdown leaves the broker registered and fenced, as KRaft
// does: the agent never unregisters (an operator's act).
func TestAgent_ShutdownLeavesBrokerFenced(t *testing.T) {
	c := newFakeCluster(t, 1)
	a := startAgent(t, c, nil)
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	epoch := a.Status().BrokerEpoch

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if b, ok := c.image().Broker(1); !ok || !b.Fenced || b.Epoch != epoch {
		t.Fatalf("broker 1 after Shutdown: %+v (registered %v); want registered at epoch %d, fenced", b, ok, epoch)
	}
	c.mu.Lock()
	unregs := c.unregisters
	c.mu.Unlock()
	if len(unregs) != 0 {
		t.Fatalf("unregister requests = %v; want none", unregs)
	}
	if st := a.Status(); st.State != StateShuttingDown {
		t.Fatalf("state after Shutdown = %q", st.State)
	}
}

func TestAgent_RegistrationRefusals(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantFatal bool
	}{
		{"unsupported metadata version", reasonErr(codes.FailedPrecondition, rpc.ReasonUnsupportedMetadataVersion, "cluster is at 9"), true},
		{"invalid request", reasonErr(codes.InvalidArgument, "", "address: empty"), true},
		{"duplicate registration is retried", reasonErr(codes.AlreadyExists, rpc.ReasonDuplicateRegistration, "broker 1 is alive"), false},
		{"unavailable is retried", reasonErr(codes.Unavailable, "", "no leader"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			c.registerErr = tt.err
			a := startAgent(t, c, nil)
			if tt.wantFatal {
				select {
				case err := <-a.Fatal():
					t.Log(err)
				case <-time.After(10 * time.Second):
					t.Fatal("no fatal error")
				}
				return
			}
			poll.Until(t, waitTimeout, "a second attempt", func() bool { return len(c.registrationCalls()) >= 2 })
			if st := a.Status(); st.State != StateRegistering {
				t.Fatalf("state = %q while refused", st.State)
			}
			c.mu.Lock()
			c.registerErr = nil
			c.mu.Unlock()
			poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
		})
	}
}

func TestStart_Refuses(t *testing.T) {
	other := t.TempDir()
	if _, err := openMeta(other, 2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"another broker's data dir", Config{BrokerID: 1, DataDir: other, Listen: "127.0.0.1:0", Controllers: []string{"127.0.0.1:1"}}, "belongs to broker 2, not broker 1"},
		{"no data dir", Config{BrokerID: 1, Listen: "127.0.0.1:0", Controllers: []string{"127.0.0.1:1"}}, "data dir is required"},
		{"no controllers", Config{BrokerID: 1, DataDir: "x", Listen: "127.0.0.1:0"}, "no controller address"},
		{"negative id", Config{BrokerID: -1, DataDir: "x", Listen: "127.0.0.1:0", Controllers: []string{"127.0.0.1:1"}}, "negative"},
		{"bad controller address", Config{BrokerID: 1, DataDir: "x", Listen: "127.0.0.1:0", Controllers: []string{"nohost"}}, `address "nohost"`},
		{"wildcard listen, nothing to advertise", Config{BrokerID: 3, DataDir: t.TempDir(), Listen: "0.0.0.0:0", Controllers: []string{"127.0.0.1:1"}}, "wildcard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Start(tt.cfg)
			if err == nil {
				a.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %q, want %q", err, tt.wantErr)
			}
		})
	}
}

// handlerFunc adapts a function to Handler's MetadataChanged; it ignores
// replica changes.
type handlerFunc func(before, after *fsm.Image)

func (f handlerFunc) MetadataChanged(before, after *fsm.Image) { f(before, after) }
func (handlerFunc) BecomeLeader(PartitionState)                {}
func (handlerFunc) BecomeFollower(PartitionState)              {}
func (handlerFunc) StopReplica(fsm.TopicID, int32, bool)       {}

// duplicateErr is a duplicate-registration refusal as the controllers send
// it: the registered session's time left and the refusing controller's epoch.
func duplicateErr(left time.Duration, controllerEpoch int64) error {
	st, err := status.New(codes.AlreadyExists, "broker 1 is registered by another live process").WithDetails(&errdetails.ErrorInfo{
		Reason: rpc.ReasonDuplicateRegistration, Domain: rpc.ErrorDomain,
		Metadata: map[string]string{
			"session_remaining_ms": strconv.FormatInt(left.Milliseconds(), 10),
			"controller_epoch":     strconv.FormatInt(controllerEpoch, 10),
		},
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// A restarted broker whose old incarnation still holds a session waits for
// it to end. Within one controller epoch, a session that outlives its
// reported end is another live process: the broker gives up. A new active
// controller times sessions afresh, so refusals from ever newer epochs (a
// failover storm) keep the broker waiting, past the point it would have
// given up, until it is let in.
func TestAgent_DuplicateRegistrationWait(t *testing.T) {
	const left = 50 * time.Millisecond
	// The give-up deadline: left + 2 heartbeats (20ms) + 1s.
	const giveUpAfter = left + 40*time.Millisecond + time.Second

	t.Run("same epoch: gives up", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		c.registerErr = duplicateErr(left, 3)
		start := time.Now()
		a := startAgent(t, c, nil)
		select {
		case err := <-a.Fatal():
			if !strings.Contains(err.Error(), "in use by another live broker process") {
				t.Fatalf("fatal error = %v", err)
			}
			if d := time.Since(start); d < giveUpAfter {
				t.Fatalf("gave up after %v, before the session could have ended (%v)", d, giveUpAfter)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the broker never gave up on a session kept alive in one epoch")
		}
	})

	t.Run("newer epochs: keeps waiting", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		start := time.Now()
		var admitted atomic.Bool
		c.registerErrFn = func(n int) error {
			if admitted.Load() {
				return nil
			}
			return duplicateErr(left, int64(n)) // a new controller each time
		}
		a := startAgent(t, c, nil)
		poll.Until(t, waitTimeout, "refusals past the give-up deadline", func() bool {
			return time.Since(start) > 2*giveUpAfter && len(c.registrationCalls()) >= 3
		})
		select {
		case err := <-a.Fatal():
			t.Fatalf("gave up during a failover storm: %v", err)
		default:
		}
		admitted.Store(true)
		poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	})
}

// The ISR of an AlterPartition goes with each member's broker epoch
// (KIP-903): the data plane's, when it gives them, else the agent's image's,
// and -1 (unchecked) for a broker the image does not hold.
func TestAgent_ISRWithEpochs(t *testing.T) {
	c := newFakeCluster(t, 1)
	b1 := c.append(registerRec(1, "one"))
	b2 := c.append(registerRec(2, "two"))
	img := c.image()
	tp := TopicPartition{TopicID: topicT, Partition: 0}
	tests := []struct {
		name    string
		change  ISRChange
		want    []*keelpb.BrokerState
		wantErr codes.Code
	}{
		{name: "epochs from the image; unknown broker unchecked", change: ISRChange{TopicID: tp.TopicID, ISR: []int32{2, 1, 9}},
			want: []*keelpb.BrokerState{{BrokerId: 2, BrokerEpoch: int64(b2)}, {BrokerId: 1, BrokerEpoch: int64(b1)}, {BrokerId: 9, BrokerEpoch: -1}}},
		{name: "epochs the data plane learned", change: ISRChange{TopicID: tp.TopicID, ISR: []int32{1, 2}, BrokerEpochs: []int64{7, 8}},
			want: []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: 7}, {BrokerId: 2, BrokerEpoch: 8}}},
		{name: "as many epochs as members, or none", change: ISRChange{TopicID: tp.TopicID, ISR: []int32{1, 2}, BrokerEpochs: []int64{7}},
			wantErr: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := isrWithEpochs(img, tt.change)
			if tt.wantErr != codes.OK {
				if status.Code(err) != tt.wantErr {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].BrokerId != tt.want[i].BrokerId || got[i].BrokerEpoch != tt.want[i].BrokerEpoch {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}
