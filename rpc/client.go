package rpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/hostport"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// Client talks to a controller quorum given any of its addresses. Writes go
// to the active controller, found by following leader hints.
type Client struct {
	addrs    []string
	dialOpts []grpc.DialOption
	failFast bool // FailFast

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	leader string // last address that accepted a write
}

// NewClient returns a client for the controllers at addrs (plaintext unless
// WithTLS). Connections are made lazily, on first use of each address. An
// address that is not host:port is refused here, naming it, rather than
// left to fail later in gRPC's words.
func NewClient(addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("--controllers: no controller address given")
	}
	for _, a := range addrs {
		if err := hostport.Check(a); err != nil {
			return nil, fmt.Errorf("--controllers: %v (want host:port, e.g. 127.0.0.1:9091)", err)
		}
	}
	o := buildOptions(opts)
	return &Client{
		addrs:    addrs,
		dialOpts: clientDialOptions(o, tlsauth.RoleController),
		failFast: o.failFast,
		conns:    make(map[string]*grpc.ClientConn),
	}, nil
}

// Addrs returns the addresses the client was given.
func (c *Client) Addrs() []string { return c.addrs }

// dialOptions keep reconnects quick: a controller that comes back is used
// again within a second, not after gRPC's default back-off of up to 2 minutes.
// Each client adds its transport credentials (clientDialOptions).
var dialOptions = []grpc.DialOption{
	grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 2 * time.Second,
	}),
	// Keepalive pings notice a peer that vanished without closing the
	// connection (a partition, a frozen host), so a long-lived metadata
	// stream to a deposed controller fails instead of waiting forever.
	grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
}

const (
	keepaliveTime    = 5 * time.Second
	keepaliveTimeout = 3 * time.Second
)

// ServerOptions are the options every Keel gRPC server uses: they give a
// connection HandshakeTimeout to finish its handshake (and tell the
// listener's bound on unauthenticated connections when it has), accept the
// clients' keepalive pings, bound each request's size by its method and its
// repeated fields by Validate's bounds before it is decoded (serverCodec),
// and check every request message by Validate before a handler sees it,
// and bound the calls in flight per connection (WithServerLimits).
// WithTLS adds mutual TLS and the authorization of every call by the
// caller's certificate: by its method before the request is read, and by
// the request, where that decides, before the check; and the bound on the
// calls in flight of each identity.
func ServerOptions(opts ...Option) []grpc.ServerOption {
	o := buildOptions(opts)
	limits := o.limits.withDefaults()
	return append([]grpc.ServerOption{
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.MaxRecvMsgSize(limits.MaxRequestBytes),
		grpc.MaxConcurrentStreams(uint32(limits.StreamsPerConn)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
		experimental.BufferPool(bufferPool),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.WriteBufferSize(writeBufferBytes),
	}, serverCallOptions(o)...)
}

// maxRecvMsgBytes bounds one request of any method (largeRequestMethods);
// the others are bounded lower (smallRequestBytes). gRPC reads a request
// whole before any check can see it, so this is also what one call in
// flight may cost before it is refused.
const maxRecvMsgBytes = 4 << 20

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("controller address %q: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Controller returns a ControllerService client for one address.
func (c *Client) Controller(addr string) (keelpb.ControllerServiceClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return keelpb.NewControllerServiceClient(cc), nil
}

// ResetBackoff makes the connection to addr, if it is waiting out gRPC's
// reconnect back-off after failed dials, dial again at once, and starts
// that back-off again from its base delay; it does nothing to an address
// not dialled yet. A broker calls it before each attempt to get its
// metadata stream back while it must be seen again quickly (see the
// broker's stream loop): gRPC alone would redial up to a second late.
func (c *Client) ResetBackoff(addr string) {
	c.mu.Lock()
	cc := c.conns[addr]
	c.mu.Unlock()
	if cc != nil {
		cc.ResetConnectBackoff()
	}
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		cc.Close()
		delete(c.conns, addr)
	}
	return nil
}

// attemptTimeout bounds one read against one controller, so that a hung
// node costs one attempt, not the whole deadline. A write's attempt may take
// longer: it must outlast the server's own write timeout (10s by default),
// or a slow but successful write (a large topic) would be retried and then
// answered "already exists".
const (
	attemptTimeout      = 3 * time.Second
	writeAttemptTimeout = 15 * time.Second
)

// Write runs call against the active controller. It follows FailedPrecondition
// leader hints at once, and on Unavailable (no leader, takeover in progress,
// node down) tries the hinted leader or the next address after a short pause,
// until ctx ends. Other errors are returned as they are. When ctx ends first,
// the error is Unavailable and names the last failure.
func (c *Client) Write(ctx context.Context, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	return c.WriteWithin(ctx, writeAttemptTimeout, call)
}

// WriteWithin is Write with each attempt bounded by attempt: a caller on a
// short deadline (a heartbeat) must not spend it all on one hung controller.
func (c *Client) WriteWithin(ctx context.Context, attempt time.Duration, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	return c.toActive(ctx, attempt, "no active controller accepted the write before the deadline", call)
}

// toActive runs call against the active controller, as Write describes; when
// ctx ends first, the error is Unavailable, says gaveUp, and names the last
// failure.
func (c *Client) toActive(ctx context.Context, attempt time.Duration, gaveUpMsg string, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	c.mu.Lock()
	target := c.leader
	c.mu.Unlock()
	if target == "" {
		// Ask every controller at once which one is active, rather than try
		// them in order: one that is frozen (SIGSTOP, a half-open
		// connection) would cost a whole attempt before the others are
		// asked.
		target = c.findLeader(ctx)
	}
	if target == "" {
		target = c.addrs[0]
	}
	// Fall back through the addresses starting after the first target, so
	// the address that just failed is not the next one tried.
	next := (slices.Index(c.addrs, target) + 1) % len(c.addrs)
	// A leader that is taking over is retried after NotReadyPause.
	// Anything else (no leader known, a node down) backs off from a short
	// pause, doubling, with jitter: thousands of brokers retrying during an
	// election must not slow the election down.
	pause := 10 * time.Millisecond
	var last error
	gaveUp := func() error {
		return status.Errorf(codes.Unavailable, "%s; last error: %s", gaveUpMsg, status.Convert(last).Message())
	}
	// With failFast, the addresses found not listening in this call: once
	// that is all of them, nothing will answer before the deadline either.
	unreachable := map[string]bool{}
	for {
		err := c.tryFor(ctx, attempt, target, call)
		if err == nil {
			c.mu.Lock()
			c.leader = target
			c.mu.Unlock()
			return nil
		}
		code := status.Code(err)
		notReady := code == codes.Unavailable && ReasonOf(err) == ReasonNotReady
		if (code == codes.Unavailable || code == codes.DeadlineExceeded) && !notReady {
			// Even when ctx is over: the next call must not start here.
			c.forgetLeader(target)
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return gaveUp()
		}
		last = err
		if c.failFast && notListening(err) {
			unreachable[target] = true
			if len(unreachable) == distinct(c.addrs) {
				return status.Errorf(codes.Unavailable, "no controller is listening at %v; last error: %s", c.addrs, status.Convert(err).Message())
			}
			// A refused connection costs the cluster nothing: try the
			// next address at once.
			target = c.addrs[next%len(c.addrs)]
			next++
			continue
		}
		hint, _ := LeaderHintOf(err)
		wait := pause/2 + rand.N(pause/2+1)
		switch {
		case code == codes.FailedPrecondition && hint != nil && hint.LeaderAddress != "" && hint.LeaderAddress != target:
			target = hint.LeaderAddress
			continue
		case notReady:
			// The leader itself, about to be active: the same target, soon.
			wait = NotReadyPause
		case code == codes.Unavailable || code == codes.DeadlineExceeded:
			switch found := c.findLeader(ctx); {
			case hint != nil && hint.LeaderAddress != "" && hint.LeaderAddress != target:
				target = hint.LeaderAddress
			case found != "" && found != target:
				target = found
			default:
				target = c.addrs[next%len(c.addrs)]
				next++
			}
			pause = min(pause*2, 500*time.Millisecond)
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return gaveUp()
		case <-time.After(wait):
		}
	}
}

// forgetLeader drops addr as the remembered leader, so the next call does
// not start at a controller that just failed.
func (c *Client) forgetLeader(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == addr {
		c.leader = ""
	}
}

// distinct counts the different addresses in addrs.
func distinct(addrs []string) int {
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		seen[a] = true
	}
	return len(seen)
}

// notListening reports whether err says that nothing listens at the
// address tried: the connection was refused or the name does not resolve,
// as opposed to a controller that answered, or hung.
func notListening(err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "connect: connection refused") || strings.Contains(msg, "produced zero addresses") ||
		strings.Contains(msg, "no such host")
}

func (c *Client) try(ctx context.Context, addr string, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	return c.tryFor(ctx, attemptTimeout, addr, call)
}

func (c *Client) tryFor(ctx context.Context, timeout time.Duration, addr string, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	cl, err := c.Controller(addr)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = call(actx, cl)
	if isBrokerAnswer(err) {
		return c.notAController(ctx, addr, err)
	}
	return err
}

// isBrokerAnswer reports whether err is the answer of a server without the
// controller service: a broker, given as a controller by mistake.
func isBrokerAnswer(err error) bool {
	return status.Code(err) == codes.Unimplemented &&
		strings.Contains(status.Convert(err).Message(), "unknown service "+keelpb.ControllerService_ServiceDesc.ServiceName)
}

// reasonNotAController marks notAController's answer, which this client
// makes itself (no server sends it).
const reasonNotAController = "NOT_A_CONTROLLER"

// isNotAController reports whether err is notAController's.
func isNotAController(err error) bool {
	return ReasonOf(err) == reasonNotAController
}

// notAController turns gRPC's "unknown service" from addr into words an
// operator acts on: a Keel broker says who it is when asked.
func (c *Client) notAController(ctx context.Context, addr string, err error) error {
	cc, cerr := c.conn(addr)
	if cerr == nil {
		ictx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		if resp, ierr := keelpb.NewBrokerServiceClient(cc).Inspect(ictx, &keelpb.InspectRequest{}); ierr == nil {
			return WithReason(codes.Unimplemented, reasonNotAController,
				fmt.Sprintf("%s is broker %d, not a controller: give the controllers' addresses (--controllers)", addr, resp.GetBrokerId()))
		}
	}
	return WithReason(codes.Unimplemented, reasonNotAController,
		fmt.Sprintf("%s is not a controller (it has no controller service: a broker, or another program?): give the controllers' addresses (--controllers); the server said: %s",
			addr, status.Convert(err).Message()))
}

// AppendNoOp commits a no-op record: proof that the quorum can commit.
func (c *Client) AppendNoOp(ctx context.Context, requestID string) (*keelpb.AppendNoOpResponse, error) {
	var resp *keelpb.AppendNoOpResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AppendNoOp(ctx, &keelpb.AppendNoOpRequest{RequestId: requestID})
		return err
	})
	return resp, err
}

// QuorumView is the quorum as each voter sees itself.
type QuorumView struct {
	// Leader is the active controller's own description, or, when no node is
	// active, that of the first node that answered.
	Leader *keelpb.DescribeQuorumResponse
	// Nodes holds each voter's own description, by voter id; a voter that did
	// not answer is absent and its error is in Errors.
	Nodes  map[int32]*keelpb.DescribeQuorumResponse
	Errors map[int32]error
	// ActiveID is the active controller, -1 when no node answering can
	// tell; ActiveKnownBy is the node that told: ActiveID itself, or a
	// follower of it when it did not answer this client.
	ActiveID, ActiveKnownBy int32
}

// DescribeQuorum asks every controller given, then every voter they name, for
// its own view, in parallel.
func (c *Client) DescribeQuorum(ctx context.Context) (*QuorumView, error) {
	first := c.describeAll(ctx, c.addrs)
	var leader, any *keelpb.DescribeQuorumResponse
	for _, r := range first {
		if r.resp == nil {
			continue
		}
		if any == nil || len(r.resp.Voters) > len(any.Voters) {
			any = r.resp
		}
		if r.resp.Active {
			leader = r.resp
		}
	}
	if any == nil {
		if isNotAController(first[0].err) {
			return nil, first[0].err
		}
		return nil, status.Errorf(codes.Unavailable, "no controller answered at %v: %v", c.addrs, first[0].err)
	}
	if leader == nil {
		leader = any
	}
	// Ask every voter in the best-informed node's configuration by its raft
	// address (which is its gRPC address: they share one port).
	voterAddrs := make([]string, len(leader.Voters))
	for i, v := range leader.Voters {
		voterAddrs[i] = v.Address
	}
	view := &QuorumView{Leader: leader, Nodes: map[int32]*keelpb.DescribeQuorumResponse{}, Errors: map[int32]error{}}
	for i, r := range c.describeAll(ctx, voterAddrs) {
		id := leader.Voters[i].Id
		if r.resp != nil {
			view.Nodes[id] = r.resp
		} else {
			view.Errors[id] = r.err
		}
	}
	// The addresses given may all be followers: the active controller is
	// then among the voters they named.
	if !view.Leader.GetActive() {
		for _, n := range view.Nodes {
			if n.GetActive() && n.GetActiveEpoch() > view.Leader.GetActiveEpoch() {
				view.Leader = n
			}
		}
	}
	view.ActiveID, view.ActiveKnownBy = activeOf(view, first)
	return view, nil
}

// activeOf is the active controller as view tells it: the node that says
// it is active, answering itself; failing that (this client cannot reach
// it), the raft leader that answering followers follow, when its own
// controller epoch record is committed in their images (so it has taken
// over). knownBy is the node whose word it is; -1, -1 when none can tell.
func activeOf(view *QuorumView, first []describeResult) (id, knownBy int32) {
	if l := view.Leader; l.GetActive() {
		return l.GetNodeId(), l.GetNodeId()
	}
	answers := make([]*keelpb.DescribeQuorumResponse, 0, len(view.Nodes)+len(first))
	for _, n := range view.Nodes {
		answers = append(answers, n)
	}
	for _, r := range first {
		if r.resp != nil {
			answers = append(answers, r.resp)
		}
	}
	var best *keelpb.DescribeQuorumResponse
	for _, n := range answers {
		if n.GetState() != "follower" || n.GetLeaderId() < 0 || n.GetControllerEpochLeaderId() != n.GetLeaderId() {
			continue
		}
		if best == nil || n.GetRaftTerm() > best.GetRaftTerm() ||
			(n.GetRaftTerm() == best.GetRaftTerm() && n.GetNodeId() < best.GetNodeId()) {
			best = n
		}
	}
	if best == nil {
		return -1, -1
	}
	// The leader answered and said it is not active (taking over, or
	// deposed and not yet told): its word wins over a follower's.
	if own, ok := view.Nodes[best.GetLeaderId()]; ok && !own.GetActive() {
		return -1, -1
	}
	return best.GetLeaderId(), best.GetNodeId()
}

type describeResult struct {
	resp *keelpb.DescribeQuorumResponse
	err  error
}

func (c *Client) describeAll(ctx context.Context, addrs []string) []describeResult {
	out := make([]describeResult, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].err = c.try(ctx, addr, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
				var err error
				out[i].resp, err = cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
				return err
			})
		}()
	}
	wg.Wait()
	return out
}
