package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The broker's states, as Inspect reports them: registering until a
// registration is accepted, then fenced or active as the controller last said
// in a heartbeat, and shutting_down from Shutdown on.
const (
	StateRegistering  = "registering"
	StateFenced       = fsm.BrokerFenced
	StateActive       = fsm.BrokerActive
	StateShuttingDown = fsm.BrokerShuttingDown
)

// staleHeartbeats is how many heartbeats in a row may name a newer
// controller epoch than the stream has shown before the stream is taken to
// be stuck on a deposed controller and is reconnected.
const staleHeartbeats = 3

// Status is a broker's own view of itself.
type Status struct {
	BrokerID      int32
	BrokerEpoch   int64 // 0 until the first registration is accepted
	IncarnationID string
	Address       string // the address registered with the controllers
	ClusterID     string // "" until the broker first reaches its cluster
	State         string // StateRegistering, StateFenced, StateActive or StateShuttingDown
	// ControllerID is the controller whose metadata push was last accepted,
	// -1 before the first.
	ControllerID int32
	// ControllerEpoch is the highest controller epoch seen.
	ControllerEpoch int64
	// MetadataOffset is the offset of the last metadata batch applied.
	MetadataOffset uint64
}

const (
	// maxUnauthenticated bounds the connections the broker's port holds
	// whose peer has not yet finished its TLS handshake (or, in
	// plaintext, sent the HTTP/2 preface), each for at most
	// rpc.HandshakeTimeout: beyond it a new connection is closed at once,
	// counted and logged, so a flood of strangers costs a bounded number
	// of goroutines and descriptors and never the connections of peers
	// already in (replicas fetching, operators).
	maxUnauthenticated = 1024
	// unauthenticatedHold is the longest one connection counts: longer than
	// the handshake deadline, so it only matters if a path forgot to say
	// its peer authenticated.
	unauthenticatedHold = 2 * rpc.HandshakeTimeout
)

// conns is cfg.Conns with its unauthenticated bound defaulted to
// maxUnauthenticated.
func (cfg *Config) conns() connlimit.Limits {
	lim := cfg.Conns
	if lim.MaxUnauthenticated == 0 {
		lim.MaxUnauthenticated = maxUnauthenticated
	}
	return lim
}

// Agent is a running broker agent: it registers, heartbeats, replays the
// metadata stream into its image and serves the broker's gRPC service.
type Agent struct {
	cfg         Config
	log         *slog.Logger
	meta        *metaFile
	incarnation string
	address     string // advertised
	client      *rpc.Client
	lis         net.Listener
	grpc        *grpc.Server
	// unauth bounds the connections lis holds whose peer has not yet
	// authenticated (maxUnauthenticated).
	unauth *connlimit.Limiter
	replay *replayer // owned by the stream loop
	// handlers are told of every change: the data plane first, if any.
	handlers []Handler
	// diff: some handler may act on replica changes, so they are computed.
	diff bool

	img atomic.Pointer[fsm.Image] // the image the handler has seen

	// session registers, heartbeats and holds the stream; run runs it.
	session *Session
	// Owned by the session's goroutines: giveUp and giveUpEpoch by its
	// registration (refused), stale by its heartbeats (answered).
	giveUp      time.Time
	giveUpEpoch int64
	// stale counts the heartbeats in a row that named a newer controller
	// epoch than stream attempt staleAttempt had shown.
	stale        int
	staleAttempt uint64

	metrics    *agentMetrics
	registered []prometheus.Collector // on cfg.Metrics, until Close
	health     *rpc.Health
	// What readiness is decided from, besides the state (Ready).
	stopping       atomic.Bool // Close has begun
	caughtUp       atomic.Bool // the last heartbeat answer's is_caught_up
	caughtUpOnce   sync.Once
	initialCatchUp chan struct{} // closed when a heartbeat first says is_caught_up
	heartbeatEpoch atomic.Int64  // the controller epoch of the last heartbeat answer
	heartbeatAt    atomic.Int64  // when the last heartbeat was answered, unix nanos

	// previousEpoch is the previous_broker_epoch registrations report
	// (KIP-966): the epoch of the last incarnation if it shut down
	// cleanly, else -1; then each epoch this process registers.
	previousEpoch atomic.Int64
	// dataPlaneErr is what the data plane's Close returned.
	dataPlaneErr error

	mu    sync.Mutex // guards the fields below
	epoch int64
	state string

	fatal     chan error
	runDone   chan struct{}      // closed when the main loop returns
	cancel    context.CancelFunc // stops the loops
	loops     sync.WaitGroup
	serving   sync.WaitGroup
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
}

// Start starts a broker agent: it checks the config and the data dir, binds
// the broker's gRPC service, and starts registering in the background. It
// returns at once; errors found later that mean the broker must stop (its
// data dir belongs to another cluster) arrive on Fatal. Every error of Start
// names what is wrong in one line and leaves nothing running.
func Start(cfg Config) (_ *Agent, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	meta, err := openMeta(cfg.DataDir, cfg.BrokerID)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %v", cfg.Listen, err)
	}
	defer func() {
		if err != nil {
			lis.Close()
		}
	}()
	address, err := advertised(cfg.Address, lis.Addr())
	if err != nil {
		return nil, err
	}
	client, err := rpc.NewClient(cfg.Controllers, rpc.WithTLS(cfg.TLS), rpc.WithDialer(cfg.Dialer))
	if err != nil {
		return nil, err
	}

	a := &Agent{
		initialCatchUp: make(chan struct{}),
		cfg:            cfg,
		log:            cfg.Logger.With("component", "broker", "broker_id", cfg.BrokerID),
		meta:           meta,
		incarnation:    uuid.NewString(),
		address:        address,
		client:         client,
		lis:            lis,
		grpc:           grpc.NewServer(rpc.ServerOptions(rpc.WithTLS(cfg.TLS), rpc.WithServerLimits(brokerLimits(cfg)))...),
		unauth:         connlimit.NewLimits(cfg.conns(), unauthenticatedHold, lis.Addr().String()),
		state:          StateRegistering,
		fatal:          make(chan error, 1),
		runDone:        make(chan struct{}),
		metrics:        newAgentMetrics(),
	}
	a.unauth.SetLogger(a.log)
	if err = a.registerMetrics(); err != nil {
		client.Close()
		return nil, err
	}
	// The clean-shutdown marker is taken only now, after every step that
	// can fail without touching the data (a port in use, say): a start that
	// fails there leaves the last shutdown clean, and the replica eligible
	// to lead from the ELR. From here on this incarnation may write.
	previous, err := takeCleanShutdown(cfg.DataDir)
	if err != nil {
		client.Close()
		a.unregisterMetrics()
		return nil, err
	}
	a.previousEpoch.Store(previous)
	if cfg.DataPlane != nil {
		a.handlers = append(a.handlers, cfg.DataPlane)
	}
	a.handlers = append(a.handlers, cfg.Handler)
	_, nop := cfg.Handler.(NopHandler)
	a.diff = cfg.DataPlane != nil || !nop
	a.replay = newReplayer(a.log, a.publish)
	a.img.Store(a.replay.img)
	a.session = a.newSession()
	if cfg.DataPlane != nil {
		// Before the first fetch can arrive and the first image is applied.
		if err = cfg.DataPlane.Start(a); err != nil {
			client.Close()
			a.unregisterMetrics()
			return nil, fmt.Errorf("start the data plane: %v", err)
		}
	}
	keelpb.RegisterBrokerServiceServer(a.grpc, brokerService{a: a})
	a.health = rpc.ServeHealth(a.grpc, keelpb.BrokerService_ServiceDesc.ServiceName, a.Ready)
	a.serving.Add(1)
	go func() {
		defer a.serving.Done()
		_ = a.grpc.Serve(a.unauth.Listener(lis))
	}()
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.loops.Add(1)
	go a.run(ctx)
	a.log.Info("broker started", "address", address, "listen", lis.Addr().String(),
		"incarnation_id", a.incarnation, "data_dir", cfg.DataDir, "cluster_id", meta.clusterID(),
		"controllers", strings.Join(cfg.Controllers, ","))
	return a, nil
}

// Addr is the address the broker's gRPC service listens on.
func (a *Agent) Addr() string { return a.lis.Addr().String() }

// Image returns the metadata image the handler has last been given. It is
// immutable: hold it as long as needed.
func (a *Agent) Image() *fsm.Image { return a.img.Load() }

// Fatal delivers the error that stopped the agent's work for good: the data
// dir belongs to another cluster, the controllers refuse this software's
// metadata versions, or the data dir cannot be written. Call Close after.
func (a *Agent) Fatal() <-chan error { return a.fatal }

// CaughtUp is closed once a heartbeat answer first says this process has
// applied the metadata log up to the controllers' (KRaft's initial
// catch-up): before that its image may lack topics the cluster has, and
// what it says of them to clients (the Kafka listener) would be wrong.
// It stays closed whatever happens after.
func (a *Agent) CaughtUp() <-chan struct{} { return a.initialCatchUp }

// Status returns the broker's own view of itself.
func (a *Agent) Status() Status {
	a.mu.Lock()
	epoch, state := a.epoch, a.state
	a.mu.Unlock()
	return Status{
		BrokerID:        a.cfg.BrokerID,
		BrokerEpoch:     epoch,
		IncarnationID:   a.incarnation,
		Address:         a.address,
		ClusterID:       a.meta.clusterID(),
		State:           state,
		ControllerID:    a.replay.controllerID.Load(),
		ControllerEpoch: a.replay.epoch.Load(),
		MetadataOffset:  a.Image().Offset,
	}
}

// BrokerID is this broker's id (Link).
func (a *Agent) BrokerID() int32 { return a.cfg.BrokerID }

// BrokerEpoch is this broker's current broker epoch, 0 before its first
// registration is accepted (Link).
func (a *Agent) BrokerEpoch() int64 { return a.currentEpoch() }

// AlterPartition sends a partition leader's ISR change to the active
// controller, stamped with this broker's id and current broker epoch, and
// each member's broker epoch (Link). Before the broker has registered it
// fails with Unavailable; a change whose BrokerEpochs does not match its
// ISR fails with InvalidArgument.
func (a *Agent) AlterPartition(ctx context.Context, change ISRChange) (*keelpb.PartitionDescription, error) {
	epoch := a.currentEpoch()
	if epoch == 0 {
		return nil, status.Errorf(codes.Unavailable, "broker %d has not registered yet", a.cfg.BrokerID)
	}
	members, err := isrWithEpochs(a.Image(), change)
	if err != nil {
		return nil, err
	}
	req := &keelpb.AlterPartitionRequest{
		BrokerId:       a.cfg.BrokerID,
		BrokerEpoch:    epoch,
		TopicId:        change.TopicID.String(),
		Partition:      change.Partition,
		LeaderEpoch:    change.LeaderEpoch,
		PartitionEpoch: change.PartitionEpoch,
		// Both forms: a controller that predates new_isr_with_epochs
		// reads new_isr.
		NewIsr:           change.ISR,
		NewIsrWithEpochs: members,
	}
	var resp *keelpb.AlterPartitionResponse
	err = a.client.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AlterPartition(ctx, req)
		return err
	})
	return resp.GetPartition(), err
}

// isrWithEpochs pairs each member of change's ISR with its broker epoch:
// change.BrokerEpochs if given, else the member's epoch in img (-1, not
// checked, for a broker img does not hold).
func isrWithEpochs(img *fsm.Image, change ISRChange) ([]*keelpb.BrokerState, error) {
	if change.BrokerEpochs != nil && len(change.BrokerEpochs) != len(change.ISR) {
		return nil, status.Errorf(codes.InvalidArgument, "ISR change of %s/%d: %d broker epochs for %d ISR members",
			change.TopicID, change.Partition, len(change.BrokerEpochs), len(change.ISR))
	}
	out := make([]*keelpb.BrokerState, len(change.ISR))
	for i, id := range change.ISR {
		epoch := int64(-1)
		if change.BrokerEpochs != nil {
			epoch = change.BrokerEpochs[i]
		} else if b, ok := img.Broker(id); ok {
			epoch = b.Epoch
		}
		out[i] = &keelpb.BrokerState{BrokerId: id, BrokerEpoch: epoch}
	}
	return out, nil
}

func (a *Agent) currentEpoch() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

// Shutdown stops the broker cleanly, in KRaft's way: a controlled
// shutdown. The agent heartbeats with want_shutdown, and keeps applying the
// metadata stream and reporting its offset, until the controller answers
// should_shut_down: it has moved this broker's leaderships to other ISR
// members, every active broker has applied the moves, and it has fenced the
// broker, so no partition that had another live ISR member is left without
// a leader. That wait ends early at ControlledShutdownTimeout or when ctx
// ends, and the broker leaves anyway (the controller then fences it when
// its session expires). Then the agent stops heartbeating and streaming,
// stops every replica (StopReplica without delete), and stops everything as
// Close does. If the data plane then closed without error (its logs
// flushed), the agent marks its data dir as cleanly shut down, so that the
// next incarnation reports this epoch at registration and keeps its
// eligible leader replica places (KIP-966); after a crash, or Close, it
// reports -1 and loses them.
//
// The broker stays registered, fenced: it keeps its place in replica sets
// and in placement while it restarts, and comes back under a new broker
// epoch. Removing a broker for good is an operator's act
// (UnregisterBroker, `keel broker unregister`). It returns a controlled
// shutdown that did not complete; the agent is stopped either way.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.setState(StateShuttingDown)
	// Load balancers drain the broker while it hands its leaderships over.
	a.health.Shutdown()
	csErr := a.controlledShutdown(ctx)
	a.stopLoops()
	a.stopReplicas()
	err := errors.Join(csErr, a.Close())
	if epoch := a.currentEpoch(); epoch > 0 && a.dataPlaneErr == nil {
		if merr := markCleanShutdown(a.cfg.DataDir, epoch); merr != nil {
			err = errors.Join(err, fmt.Errorf("marking the clean shutdown: %v", merr))
		} else {
			a.log.Info("clean shutdown recorded", "broker_epoch", epoch)
		}
	}
	return err
}

// controlledShutdown asks the controller to release the broker and waits
// until it does, or until ControlledShutdownTimeout or ctx ends.
func (a *Agent) controlledShutdown(ctx context.Context) error {
	if a.currentEpoch() == 0 {
		return nil // never registered: there is nothing to hand over
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ControlledShutdownTimeout)
	defer cancel()
	start := time.Now()
	a.log.Info("controlled shutdown: asking the controller to move this broker's leaderships away")
	a.session.RequestShutdown()
	select {
	case <-a.session.Released():
	case <-a.runDone:
		select {
		case <-a.session.Released():
		default:
			return errors.New("controlled shutdown: the agent had already stopped")
		}
	case <-ctx.Done():
		return fmt.Errorf("controlled shutdown of broker %d did not complete in %v; leaving without it",
			a.cfg.BrokerID, time.Since(start).Round(time.Millisecond))
	}
	a.log.Info("controlled shutdown complete", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// stopReplicas tells the handlers to stop every replica the broker holds,
// keeping the data. The loops have stopped, so no publish runs beside it.
func (a *Agent) stopReplicas() {
	if !a.diff {
		return
	}
	var held []TopicPartition
	a.Image().PartitionsOnBroker(a.cfg.BrokerID, func(p *fsm.Partition) bool {
		held = append(held, TopicPartition{p.TopicID, p.Partition})
		return true
	})
	for _, h := range a.handlers {
		for _, tp := range held {
			h.StopReplica(tp.TopicID, tp.Partition, false)
		}
	}
}

// Close stops the agent without a controlled shutdown, as a crash would:
// the controllers fence the broker when its session expires and move its
// leaderships then. It waits for every goroutine it started.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.stopping.Store(true)
		a.health.Shutdown() // NOT_SERVING before anything stops
		a.stopLoops()
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		grace := time.NewTimer(2 * time.Second)
		select {
		case <-stopped:
		case <-grace.C:
			a.grpc.Stop()
			<-stopped
		}
		grace.Stop()
		a.serving.Wait()
		if a.cfg.DataPlane != nil {
			if err := a.cfg.DataPlane.Close(); err != nil {
				a.dataPlaneErr = err
				a.log.Warn("data plane did not close cleanly", "err", err)
			}
		}
		a.closeErr = a.client.Close()
		a.unregisterMetrics()
		a.log.Info("broker stopped")
	})
	return a.closeErr
}

func (a *Agent) stopLoops() {
	a.stopOnce.Do(func() {
		a.cancel()
		a.loops.Wait()
	})
}

// fail reports a fatal error; the loop that found it then returns.
func (a *Agent) fail(err error) {
	a.log.Error("broker cannot continue", "err", err)
	select {
	case a.fatal <- err:
	default:
	}
}

func (a *Agent) setState(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == s || a.state == StateShuttingDown {
		return
	}
	a.log.Info("broker state", "from", a.state, "to", s, "broker_epoch", a.epoch)
	a.state = s
}

// publish is the replayer's hook: every new image passes through here, in
// order, on the stream loop's goroutine.
func (a *Agent) publish(before, after *fsm.Image) error {
	learned, err := a.meta.learnClusterID(after.ClusterID, a.controllersName())
	if err != nil {
		return err
	}
	if learned {
		a.log.Info("joined cluster", "cluster_id", after.ClusterID)
	}
	for _, h := range a.handlers {
		h.MetadataChanged(before, after)
	}
	if a.diff {
		if ch := DiffReplicas(a.cfg.BrokerID, before, after); !ch.Empty() {
			for _, h := range a.handlers {
				deliver(h, ch)
			}
		}
	}
	a.img.Store(after)
	return nil
}

func (a *Agent) controllersName() string {
	return "the controllers at " + strings.Join(a.cfg.Controllers, ",")
}

// run is the agent's main loop: its session registers, heartbeats and
// replays the stream until it stops or fails for good.
func (a *Agent) run(ctx context.Context) {
	defer a.loops.Done()
	defer close(a.runDone)
	if err := a.session.Run(ctx); err != nil && ctx.Err() == nil {
		a.fail(err)
	}
}

// newSession is the agent's session: a.replay follows the stream, and the
// hooks below keep the agent's state.
func (a *Agent) newSession() *Session {
	return NewSession(SessionConfig{
		BrokerID:          a.cfg.BrokerID,
		Controllers:       a.cfg.Controllers,
		Client:            a.client,
		HeartbeatInterval: a.cfg.HeartbeatInterval,
		DataDir:           a.cfg.DataDir,
		Logger:            a.log,
		Follower:          follower{a},
		ClusterID:         a.meta.clusterID,
		Registration:      a.registration,
		Registered:        a.registrationAccepted,
		Refused:           a.refused,
		Forgotten:         func() { a.setState(StateRegistering) },
		Answered:          a.answered,
		Reconnected:       a.metrics.reconnects.Inc,
	})
}

// registration is the request of each registration attempt.
func (a *Agent) registration() *keelpb.RegisterBrokerRequest {
	return &keelpb.RegisterBrokerRequest{
		BrokerId:            a.cfg.BrokerID,
		IncarnationId:       a.incarnation,
		Address:             a.address,
		KafkaAddress:        a.cfg.KafkaAddress,
		Rack:                a.cfg.Rack,
		MinMetadataVersion:  fsm.MinMetadataVersion,
		MaxMetadataVersion:  a.cfg.MaxMetadataVersion,
		ClusterId:           a.meta.clusterID(),
		PreviousBrokerEpoch: a.previousEpoch.Load(),
	}
}

// registrationAccepted takes an accepted registration in.
func (a *Agent) registrationAccepted(resp *keelpb.RegisterBrokerResponse) error {
	a.giveUp = time.Time{} // the next registration waits afresh
	if learned, err := a.meta.learnClusterID(resp.GetClusterId(), a.controllersName()); err != nil {
		return err
	} else if learned {
		a.log.Info("joined cluster", "cluster_id", resp.GetClusterId())
	}
	a.log.Info("registered", "broker_epoch", resp.GetBrokerEpoch(), "cluster_id", resp.GetClusterId(),
		"controller_epoch", resp.GetControllerEpoch(), "previous_broker_epoch", a.previousEpoch.Load())
	if seen := a.replay.epoch.Load(); resp.GetControllerEpoch() < seen {
		a.log.Warn("the controllers' epoch went back: the quorum was started again from a snapshot; following it from a snapshot of its metadata",
			"controller_epoch", resp.GetControllerEpoch(), "seen", seen)
		a.replay.restart(resp.GetControllerEpoch())
	}
	a.mu.Lock()
	a.epoch = resp.GetBrokerEpoch()
	a.mu.Unlock()
	// A later registration of this process (its session lost)
	// loses nothing: its logs are the ones this epoch kept.
	a.previousEpoch.Store(resp.GetBrokerEpoch())
	a.caughtUp.Store(false) // until a heartbeat of this epoch says so
	// A new registration starts fenced, until the controller sees
	// that the broker has caught up.
	a.setState(StateFenced)
	return nil
}

// refused decides what follows a failed registration attempt: another, or
// none for an answer that no retry can change: another cluster,
// unsupported metadata versions, a bad request.
func (a *Agent) refused(err error) (retryBy time.Time, stop error) {
	msg := status.Convert(err).Message()
	switch reason := rpc.ReasonOf(err); {
	case reason == rpc.ReasonInconsistentClusterID:
		return time.Time{}, clusterMismatchf("the controllers refused broker %d (data dir %s): %s", a.cfg.BrokerID, a.cfg.DataDir, msg)
	case reason == rpc.ReasonUnsupportedMetadataVersion:
		return time.Time{}, fmt.Errorf("the controllers refused broker %d: %s", a.cfg.BrokerID, msg)
	case status.Code(err) == codes.InvalidArgument, status.Code(err) == codes.PermissionDenied:
		// A bad request, or a certificate that is not this broker's.
		return time.Time{}, fmt.Errorf("the controllers refused broker %d's registration: %s", a.cfg.BrokerID, msg)
	case reason == rpc.ReasonDuplicateRegistration:
		// The previous incarnation (killed, or restarted too quickly)
		// may still hold a session; if it is dead, the session ends
		// within the time the controller reports and this registration
		// then succeeds. If it outlives that, the other process is
		// alive: two brokers must not share an id, so give up.
		ds, ok := rpc.DuplicateSessionOf(err)
		if !ok {
			ds.Remaining = duplicateWaitDefault
		}
		if a.giveUp.IsZero() || ds.ControllerEpoch != a.giveUpEpoch {
			a.giveUp = time.Now().Add(ds.Remaining + 2*a.cfg.HeartbeatInterval + time.Second)
			a.giveUpEpoch = ds.ControllerEpoch
		}
		if time.Now().After(a.giveUp) {
			return time.Time{}, fmt.Errorf("broker id %d is in use by another live broker process: %s", a.cfg.BrokerID, msg)
		}
		a.log.Warn("another incarnation of this broker is still registered; retrying until its session ends", "err", msg,
			"give_up_in", time.Until(a.giveUp).Round(time.Millisecond))
		return a.giveUp.Add(10 * time.Millisecond), nil
	default:
		a.log.Warn("registration failed; retrying", "err", msg)
		return time.Time{}, nil
	}
}

// duplicateWaitDefault bounds the wait for an old incarnation's session when
// the controller does not say how long it has left.
const duplicateWaitDefault = 30 * time.Second

// answered takes a heartbeat answer in.
func (a *Agent) answered(resp *keelpb.BrokerHeartbeatResponse, took time.Duration) {
	a.metrics.heartbeat.Observe(took.Seconds())
	a.heartbeatAt.Store(time.Now().UnixNano())
	a.heartbeatEpoch.Store(resp.GetControllerEpoch())
	a.caughtUp.Store(resp.GetIsCaughtUp())
	if resp.GetIsCaughtUp() {
		a.caughtUpOnce.Do(func() { close(a.initialCatchUp) })
	}
	if resp.GetIsFenced() {
		a.setState(StateFenced)
	} else {
		a.setState(StateActive)
	}
	// A stream that keeps showing an older controller epoch than the
	// heartbeats do is stuck on a deposed controller whose connection
	// has not failed (a partition): reconnect it. The count is of one
	// stream attempt: one the stream loop has just opened to the new
	// controller (after its own reconnect) gets its own heartbeats to show
	// the new epoch, and is never cancelled for its predecessor's lag.
	attempt := a.session.currentStreamAttempt()
	if resp.GetControllerEpoch() > a.replay.epoch.Load() {
		if attempt != a.staleAttempt {
			a.stale, a.staleAttempt = 0, attempt
		}
		if a.stale++; a.stale >= staleHeartbeats {
			a.log.Info("the metadata stream lags the active controller's epoch; reconnecting",
				"stream_epoch", a.replay.epoch.Load(), "controller_epoch", resp.GetControllerEpoch())
			a.session.kickStream(attempt)
			a.stale = 0
		}
	} else {
		a.stale = 0
	}
}

// follower is the Agent as its session's Follower: the replayer takes the
// stream in, and the heartbeats report the image the handlers have seen.
type follower struct{ a *Agent }

func (f follower) Offset() uint64                         { return f.a.Image().Offset }
func (f follower) FromOffset() uint64                     { return f.a.replay.fromOffset() }
func (f follower) Handle(push *keelpb.MetadataPush) error { return f.a.replay.handle(push) }
func (f follower) Reset()                                 { f.a.replay.reset() }
func (f follower) OthersShuttingDown() bool {
	return otherShuttingDown(f.a.Image(), f.a.cfg.BrokerID)
}

// otherShuttingDown reports whether a broker other than self is in
// controlled shutdown in img.
func otherShuttingDown(img *fsm.Image, self int32) bool {
	for _, b := range img.Brokers() {
		if b.ShuttingDown && b.ID != self {
			return true
		}
	}
	return false
}

// heartbeatTimeout bounds one heartbeat: two intervals, and at least
// minHeartbeatTimeout.
func (a *Agent) heartbeatTimeout() time.Duration {
	return heartbeatTimeout(a.cfg.HeartbeatInterval)
}
