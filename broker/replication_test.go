package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// recordingHandler remembers the replica changes it is told of, in order,
// into log (shared with others when given), each line prefixed by name.
type recordingHandler struct {
	NopHandler
	name string
	mu   *sync.Mutex
	log  *[]string
}

func newRecordingHandler(name string) *recordingHandler {
	return &recordingHandler{name: name, mu: &sync.Mutex{}, log: new([]string)}
}

func (h *recordingHandler) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.log = append(*h.log, h.name+fmt.Sprintf(format, args...))
}

func (h *recordingHandler) events() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.log)
}

// MetadataChanged records batches that change t-0.
func (h *recordingHandler) MetadataChanged(before, after *fsm.Image) {
	was, _ := before.Partition(topicT, 0)
	is, _ := after.Partition(topicT, 0)
	if was != is {
		h.add("metadata")
	}
}

func (h *recordingHandler) BecomeLeader(p PartitionState) {
	h.add("leader %s-%d epoch=%d", p.Topic, p.Partition, p.LeaderEpoch)
}

func (h *recordingHandler) BecomeFollower(p PartitionState) {
	h.add("follower %s-%d leader=%d epoch=%d", p.Topic, p.Partition, p.Leader, p.LeaderEpoch)
}

func (h *recordingHandler) StopReplica(id fsm.TopicID, partition int32, del bool) {
	h.add("stop %x-%d delete=%v", id[0], partition, del)
}

// recordingDataPlane is a DataPlane that only records.
type recordingDataPlane struct {
	*recordingHandler
}

func (recordingDataPlane) Start(Link) error { return nil }
func (recordingDataPlane) ReplicaFetch(context.Context, *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	return &keelpb.FetchResponse{}, nil
}
func (recordingDataPlane) Replicas() []ReplicaStatus { return nil }
func (recordingDataPlane) Close() error              { return nil }

func inspect(t *testing.T, a *Agent) *keelpb.InspectResponse {
	t.Helper()
	bc, err := rpc.DialBroker(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	resp, err := bc.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func describeReplicas(rs []*keelpb.ReplicaState) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s-%d %s leader=%d epoch=%d isr=%v", r.Topic, r.Partition, r.Role, r.Leader, r.LeaderEpoch, r.Isr))
	}
	return strings.Join(out, "; ")
}

func TestAgent_WithoutDataPlane(t *testing.T) {
	c := newFakeCluster(t, 1)
	a := startAgent(t, c, nil)
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	c.append(topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2}, []int32{1}, 1),
		partitionRec(topicT, 1, []int32{2, 1}, []int32{1}, 1), partitionRec(topicT, 2, []int32{2}, []int32{2}, 2))
	poll.Until(t, waitTimeout, "the broker to apply the topic", inSync(a, c))

	// Roles come from the image.
	want := "t-0 leader leader=1 epoch=0 isr=[1]; t-1 leader leader=1 epoch=0 isr=[1]"
	if got := describeReplicas(inspect(t, a).Partitions); got != want {
		t.Fatalf("inspect: %s, want %s", got, want)
	}
	// And nobody can fetch.
	_, err := grpcFetch(t, a.Addr(), &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String()})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Fetch without a data plane: %v", err)
	}
}

func grpcFetch(t *testing.T, addr string, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	t.Helper()
	cl, err := DialLeader(addr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return cl.Fetch(context.Background(), req)
}

// TestAgent_HandlerOrder: for each batch, the data plane before the
// handler, and MetadataChanged before the role changes.
func TestAgent_HandlerOrder(t *testing.T) {
	c := newFakeCluster(t, 1)
	h := newRecordingHandler("handler: ")
	dp := recordingDataPlane{&recordingHandler{name: "data plane: ", mu: h.mu, log: h.log}}
	a := startAgent(t, c, func(cfg *Config) { cfg.Handler, cfg.DataPlane = h, dp })
	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	c.append(topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2}, []int32{1}, 1), partitionRec(topicT, 1, []int32{2, 1}, []int32{2, 1}, 2))
	poll.Until(t, waitTimeout, "the broker to apply the topic", inSync(a, c))
	want := []string{
		"data plane: metadata", "handler: metadata",
		"data plane: leader t-0 epoch=0", "data plane: follower t-1 leader=2 epoch=0",
		"handler: leader t-0 epoch=0", "handler: follower t-1 leader=2 epoch=0",
	}
	if got := h.events(); !slices.Equal(got, want) {
		t.Fatalf("calls:\n got %q\nwant %q", got, want)
	}
}

func TestAgent_ControlledShutdown(t *testing.T) {
	tests := []struct {
		name string
		// shutdownAfter is the fake controller's (-1: never).
		shutdownAfter int
		timeout       time.Duration
		// during runs while Shutdown waits, after its first request.
		during      func(t *testing.T, c *fakeCluster, a *Agent)
		wantErr     string
		wantRelease bool // should_shut_down was answered
	}{
		{name: "released once it has applied the leadership moves", shutdownAfter: 3, wantRelease: true},
		{name: "never released: leaves at the timeout", shutdownAfter: -1, timeout: 300 * time.Millisecond,
			wantErr: "did not complete"},
		{name: "forgotten by the controller meanwhile: nothing left to hand over", shutdownAfter: -1,
			during: func(t *testing.T, c *fakeCluster, a *Agent) {
				c.append(unregisterRec(1, a.Status().BrokerEpoch))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			c.shutdownAfter = tt.shutdownAfter
			b2 := c.append(registerRec(2, "two"))
			c.append(unfenceRec(2, int64(b2)))
			h := newRecordingHandler("")
			dp := recordingDataPlane{newRecordingHandler("")}
			a := startAgent(t, c, func(cfg *Config) {
				cfg.Handler, cfg.DataPlane = h, dp
				cfg.ControlledShutdownTimeout = tt.timeout
			})
			poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
			epoch := a.Status().BrokerEpoch
			c.append(topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2}, []int32{1, 2}, 1))
			poll.Until(t, waitTimeout, "the broker to apply the topic", inSync(a, c))

			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				done <- a.Shutdown(ctx)
			}()
			if tt.during != nil {
				poll.Until(t, waitTimeout, "a heartbeat asking to shut down", func() bool {
					for _, hb := range c.heartbeatCalls() {
						if hb.WantShutdown {
							return true
						}
					}
					return false
				})
				tt.during(t, c, a)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Shutdown did not return")
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Shutdown = %v, want %q", err, tt.wantErr)
			}

			var asks []*keelpb.BrokerHeartbeatRequest
			for _, hb := range c.heartbeatCalls() {
				if hb.WantShutdown {
					asks = append(asks, hb)
				}
			}
			c.mu.Lock()
			at, unregs := c.shutdownAt[1], len(c.unregisters)
			c.mu.Unlock()
			b, registered := c.image().Broker(1)
			if len(asks) == 0 || at == 0 {
				t.Fatalf("%d heartbeats asked to shut down; shutdown batch at %d", len(asks), at)
			}
			if tt.wantRelease {
				if len(asks) < tt.shutdownAfter {
					t.Fatalf("released after %d heartbeats, want %d", len(asks), tt.shutdownAfter)
				}
				if last := asks[len(asks)-1]; last.MetadataOffset < at || last.BrokerEpoch != epoch {
					t.Fatalf("last heartbeat %v, the moves are at offset %d", last, at)
				}
			}
			// It kept applying the stream: it saw the leadership move away
			// before it stopped its replica, keeping the data.
			want := []string{"metadata", "leader t-0 epoch=0", "metadata", "follower t-0 leader=2 epoch=1", "stop 7-0 delete=false"}
			if got := h.events(); !slices.Equal(got, want) {
				t.Fatalf("handler calls:\n got %q\nwant %q", got, want)
			}
			if got := dp.events(); !slices.Equal(got, want) {
				t.Fatalf("data plane calls:\n got %q\nwant %q", got, want)
			}
			if unregs != 0 {
				t.Fatalf("%d unregistrations; want none: the broker stays registered", unregs)
			}
			if tt.wantRelease && (!registered || !b.Fenced) {
				t.Fatalf("broker 1 after its controlled shutdown: %+v (registered %v); want registered, fenced", b, registered)
			}
			if st := a.Status(); st.State != StateShuttingDown {
				t.Fatalf("state after Shutdown = %q", st.State)
			}
		})
	}
}

func TestAgent_ShutdownBeforeRegistering(t *testing.T) {
	c := newFakeCluster(t, 1)
	c.registerErr = status.Error(codes.Unavailable, "no leader")
	a := startAgent(t, c, func(cfg *Config) { cfg.DataPlane = recordingDataPlane{newRecordingHandler("")} })
	poll.Until(t, waitTimeout, "a registration attempt", func() bool { return len(c.registrationCalls()) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if hbs := c.heartbeatCalls(); len(hbs) != 0 {
		t.Fatalf("heartbeats: %v", hbs)
	}
}
