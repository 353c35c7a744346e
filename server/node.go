// Package server assembles one Keel controller process (a Node): the shared
// listener, the raft node and its stores, the FSM, the controller, and the
// controller's gRPC services, which turn calls into controller calls and
// controller errors into status codes (toStatus, the only place that does).
// cmd/keel and the tests start controllers through it, so a node in a test
// is wired exactly as a node in production.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/atomicfile"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// NodeConfig configures one controller node.
type NodeConfig struct {
	NodeID int32
	// Listen is the address to bind (raft and gRPC share it). Empty means
	// this node's address in Voters.
	Listen  string
	DataDir string
	Voters  []raftlog.Voter
	// Join (--join) starts a node with an empty data dir without
	// bootstrapping, to be added to a running quorum (keel quorum
	// add-voter). Its address is its entry in Voters if there is one, else
	// Listen. With existing raft state it changes nothing.
	Join bool
	// ClusterID is the id a new cluster gets (empty: a random UUID) and, once
	// recorded in the data dir, the id the data dir must belong to.
	ClusterID    string
	Timing       raftlog.Timing
	WriteTimeout time.Duration
	// SessionTimeout is the broker session timeout (default 9s).
	SessionTimeout time.Duration
	// CrashGrace is how long a broker whose metadata stream's connection
	// closed may take to come back before it is fenced (--crash-grace);
	// zero turns crash detection off.
	CrashGrace time.Duration
	// RestoreFrom is a snapshot file a brand-new quorum starts from.
	RestoreFrom string
	// InitialMetadataVersion is the metadata.version a new cluster starts
	// at (0: the binary's latest).
	InitialMetadataVersion uint32
	// MaxMetadataVersion, when not 0, is the highest metadata.version this
	// node says it supports, and its state machine applies: test wiring
	// that pretends an older binary.
	MaxMetadataVersion uint32
	// LeaderImbalanceCheckInterval is how often automatic leader rebalance
	// runs (default 300s; negative: never).
	LeaderImbalanceCheckInterval time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune automatic
	// raft snapshots (see raftlog.Config); zero keeps raftlog's defaults.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	LogStore          string // --log-store: raftlog.LogStoreBoltDB ("" too) or raftlog.LogStoreWAL
	// RaftDial (--raft-dial) maps peers to the addresses this node dials
	// them at, when those differ from the voter list's (see raftlog.Config).
	RaftDial map[int32]string
	Version  string
	Logger   *slog.Logger
	// TLS, when set, is the node's mutual TLS (--tls-cert, --tls-key,
	// --tls-ca): raft between controllers and the gRPC service both require
	// it, and every gRPC call is authorized by the caller's certificate. Its
	// certificate must be controller-<NodeID>. Nil is plaintext.
	TLS *tlsauth.Config
	// Limits bound the gRPC calls in flight per connection and per
	// certificate identity (rpc.ServerLimits); zero fields take the
	// defaults.
	Limits rpc.ServerLimits
	// Mux, if set, is an already bound listener to use instead of Listen
	// (keel dev binds its ports before it knows the voter list).
	Mux *raftlog.Mux
	// Conns bounds the connections Listen's port holds
	// (raftlog.ListenLimits); the zero value bounds only those not yet
	// authenticated, to raftlog's default.
	Conns connlimit.Limits
	// Metrics, when set, gets the node's controller and raft metrics (see
	// controller.Config.Metrics) and its port's count of unauthenticated
	// connections (connlimit); nil registers none.
	Metrics prometheus.Registerer
	// TuneController, for tests, adjusts the controller's config before it
	// starts (a fault injected into its takeover, say).
	TuneController func(*controller.Config)
	// Now is the clock of broker sessions (controller.Config.Now); nil is
	// time.Now. It is for tests, which move a fake clock to expire
	// sessions without waiting for them: no command sets it.
	Now func() time.Time
	// FailStop, if set, stops the process when raft cannot store a new
	// term (see raftlog.Config.FailStop); it must not return. Nil: raft
	// panics.
	FailStop func(err error)
	// RollbackCheckWait is how long a node starting on a data dir with raft
	// state waits for its peers to say what they saw it hold (rollback.go):
	// 0 means DefaultRollbackCheckWait; negative, it does not ask.
	RollbackCheckWait time.Duration
	// TestRestorePace, above zero, makes every snapshot restore take this
	// long (raftlog.Config.TestRestorePace): test wiring.
	TestRestorePace time.Duration
}

// MetricRaftStorageErrors counts the raft log and stable store's failed
// reads and writes on this node (a full or read-only disk, an I/O error);
// the node registers it with NodeConfig.Metrics. While the latest failed
// write has not been followed by one that succeeds, the node is not ready.
const MetricRaftStorageErrors = "keel_raft_storage_errors_total"

// MetricRaftCrashElections counts the elections this node started at once
// because the raft leader's process was gone (raftlog's leaderCrash).
const MetricRaftCrashElections = "keel_raft_crash_elections_total"

// Node is one running controller process: the shared listener, the raft node
// and its stores, the FSM, the controller and its gRPC services.
type Node struct {
	cfg     NodeConfig
	log     *slog.Logger
	mux     *raftlog.Mux
	node    *raftlog.Node
	fsm     *fsm.FSM
	applied *controller.AppliedLog
	ctrl    *controller.Controller
	grpc    *grpc.Server
	health  *rpc.Health
	peers   *rpc.PeerClient // this node's questions to the other voters
	// registered are the node's own metrics on cfg.Metrics, until Close.
	registered []prometheus.Collector

	stopping atomic.Bool // Close has begun: not ready
	// started: raft and the controller run; until then the gRPC server
	// answers only what peers ask as they start (rollback.go).
	started atomic.Bool
	// highWater are the data dir's marks, once raftlog has read them.
	highWater atomic.Pointer[raftlog.HighWater]
	// snapshotLoad is how far raft has read the snapshot it restores: a
	// starting node says so to every call it refuses (startingError).
	snapshotLoad raftlog.SnapshotLoad
	fatal        chan error
	stopWatch    chan struct{}
	wg           sync.WaitGroup
	closeOnce    sync.Once
}

// StartNode starts a controller node. Every error names what is wrong
// in one line and leaves nothing running.
func StartNode(cfg NodeConfig) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RollbackCheckWait == 0 {
		cfg.RollbackCheckWait = DefaultRollbackCheckWait
	}
	self, err := selfVoter(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.Timing.Validate(); err != nil {
		return nil, err
	}
	if err := raftlog.CheckLogStore(cfg.LogStore); err != nil {
		return nil, err
	}
	if cfg.RestoreFrom != "" {
		// Refuse a bad backup now, with one line, not after an election.
		if err := verifySnapshotFile(cfg.RestoreFrom); err != nil {
			return nil, fmt.Errorf("--restore-from %s: %w", cfg.RestoreFrom, err)
		}
	}
	mux := cfg.Mux
	if mux == nil {
		listen := cfg.Listen
		if listen == "" {
			listen = self.Address
		}
		if mux, err = raftlog.ListenLimits(listen, cfg.Conns); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			mux.Close()
		}
	}()
	mux.SetLogger(cfg.Logger)

	s := &Node{
		cfg:       cfg,
		log:       cfg.Logger,
		mux:       mux,
		fatal:     make(chan error, 1),
		stopWatch: make(chan struct{}),
	}
	if err := s.registerMetrics(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.unregisterMetrics()
		}
	}()
	ccfg := controller.Config{
		NodeID:         cfg.NodeID,
		ClusterID:      cfg.ClusterID,
		SessionTimeout: cfg.SessionTimeout,
		CrashGrace:     cfg.CrashGrace,
		Logger:         cfg.Logger,

		LeaderImbalanceCheckInterval: cfg.LeaderImbalanceCheckInterval,
		RestoreFrom:                  cfg.RestoreFrom,
		InitialMetadataVersion:       cfg.InitialMetadataVersion,
		MaxMetadataVersion:           cfg.MaxMetadataVersion,
		Metrics:                      cfg.Metrics,
		Now:                          cfg.Now,
		AskPeer:                      askPeer(cfg.TLS),
		CompareImage:                 compareImage(cfg.TLS),
	}
	if cfg.TuneController != nil {
		cfg.TuneController(&ccfg)
	}
	// A node pretending an older binary (test wiring) applies as one too.
	s.fsm = fsm.NewWithMaxMetadataVersion(ccfg.MaxMetadataVersion)
	s.applied = controller.NewAppliedLog(s.fsm, 0, 0)
	s.ctrl = controller.New(ccfg, s.applied)
	s.peers = rpc.NewPeerClient(rpc.WithTLS(cfg.TLS))
	defer func() {
		if err != nil {
			s.peers.Close()
		}
	}()

	// The gRPC server serves from now on, before raft starts, so that peers
	// starting at the same time get their answers about themselves
	// (rollback.go); every other call waits for the start (gate).
	// connTracker tells a broker's stream whose connection closed (crash
	// detection).
	s.grpc = grpc.NewServer(append(rpc.ServerOptions(rpc.WithTLS(cfg.TLS), rpc.WithServerLimits(cfg.Limits), rpc.WithForwardedACLs(s.forwardedACLs)), grpc.StatsHandler(connTracker{}),
		grpc.ChainUnaryInterceptor(s.gateUnary), grpc.ChainStreamInterceptor(s.gateStream))...)
	newControllerService(s.ctrl, s, cfg.Version, cfg.WriteTimeout).register(s.grpc)
	peerService{node: s}.register(s.grpc)
	s.health = rpc.ServeHealth(s.grpc, keelpb.ControllerService_ServiceDesc.ServiceName, s.Ready)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Serve returns nil once Close has stopped it; anything else means
		// the node no longer answers brokers or operators while raft goes
		// on, so it must stop rather than linger half alive.
		if err := s.grpc.Serve(mux.GRPC()); err != nil && !s.stopping.Load() {
			s.fail(fmt.Errorf("the gRPC server stopped serving: %w", err))
		}
	}()
	defer func() {
		if err != nil {
			s.stopping.Store(true)
			s.health.Shutdown()
			s.grpc.Stop()
			s.wg.Wait()
		}
	}()

	s.node, err = raftlog.Open(raftlog.Config{
		NodeID:    cfg.NodeID,
		Advertise: self.Address,
		DataDir:   cfg.DataDir,
		Voters:    cfg.Voters,
		Join:      cfg.Join,
		ClusterID: cfg.ClusterID,
		Timing:    cfg.Timing,
		Logger:    cfg.Logger,

		SnapshotThreshold: cfg.SnapshotThreshold,
		SnapshotInterval:  cfg.SnapshotInterval,
		TrailingLogs:      cfg.TrailingLogs,
		LogStore:          cfg.LogStore,
		DialAddrs:         cfg.RaftDial,
		TLS:               cfg.TLS,
		VerifySnapshot:    verifySnapshot,
		BeforeRaft:        s.beforeRaft,
		FailStop:          cfg.FailStop,
		SnapshotLoad:      &s.snapshotLoad,
		TestRestorePace:   cfg.TestRestorePace,
		AskLeaderContact:  askLeaderContact(s.peers),
	}, s.applied, mux)
	if err != nil {
		return nil, err
	}
	s.ctrl.Start(s.node)
	if cfg.Metrics != nil {
		storageErrors := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: MetricRaftStorageErrors,
			Help: "Failed reads and writes of this node's raft log and stable store (a full or read-only disk, an I/O error). The node is not ready from a failed write until a write succeeds.",
		}, func() float64 { return float64(s.node.StorageErrors()) })
		// Like the controller's, it panics on a registry that already
		// holds it (two nodes on one registry).
		crashElections := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: MetricRaftCrashElections,
			Help: "Elections this node started at once because the raft leader's process was gone: its connection closed and its port refused (--raft-crash-election).",
		}, func() float64 { return float64(s.node.CrashElections()) })
		cols := append([]prometheus.Collector{storageErrors, crashElections}, crashElectionVetoes(s.node)...)
		cfg.Metrics.MustRegister(cols...)
		s.registered = append(s.registered, cols...)
	}

	s.started.Store(true)
	s.wg.Add(1)
	go s.watchClusterID()
	s.wg.Add(1)
	go s.watchRemoved()
	s.log.Info("controller started", "node_id", cfg.NodeID, "listen", mux.Addr().String(),
		"advertise", self.Address, "data_dir", cfg.DataDir)
	return s, nil
}

// watchClusterID records the cluster id in the data dir once the log names
// it, and stops the node if it turns out to belong to another cluster.
func (s *Node) watchClusterID() {
	defer s.wg.Done()
	for {
		img, changed := s.fsm.Watch()
		if id := img.ClusterID; id != "" {
			err := s.node.RecordClusterID(id)
			if err == nil && s.cfg.ClusterID != "" && s.cfg.ClusterID != id {
				err = fmt.Errorf("this node's quorum is cluster %s, not --cluster-id %s", id, s.cfg.ClusterID)
			}
			if err != nil {
				s.fail(err)
			}
			return
		}
		select {
		case <-changed:
		case <-s.stopWatch:
			return
		}
	}
}

// Fatal delivers an error that means the node must stop: it belongs to
// another cluster, it was removed from the quorum (an error wrapping
// controller.ErrRemoved), or its gRPC server stopped serving.
func (s *Node) Fatal() <-chan error { return s.fatal }

// fail delivers err on Fatal unless an earlier error already waits there:
// the first reason to stop is the one reported, and no sender ever blocks,
// since Close waits for every sender to return.
func (s *Node) fail(err error) {
	select {
	case s.fatal <- err:
	default:
		s.log.Warn("the node must stop, and already has a reason to", "err", err)
	}
}

// ID is the node's id (--node-id).
func (s *Node) ID() int32 { return s.cfg.NodeID }

// Addr is the address the node listens on.
func (s *Node) Addr() string { return s.mux.Addr().String() }

// Controller returns the node's controller.
func (s *Node) Controller() *controller.Controller { return s.ctrl }

// FSM returns the node's state machine.
func (s *Node) FSM() *fsm.FSM { return s.fsm }

// Log returns the node's raft log: the controller's consensus.Log, and raft
// itself for tests that look at raft.
func (s *Node) Log() *raftlog.Node { return s.node }

// Close stops the node: its health status goes NOT_SERVING first, then
// gRPC stops (in-flight calls get a moment to finish), then leadership
// work, then raft and its stores, then the listener.
func (s *Node) Close() error { return s.stop(true) }

// Crash stops the node as a crash would look to the rest of the quorum: a
// leader hands nothing on, so the others elect a new one only once their
// election timeout passes, and in-flight calls are cut off instead of
// finishing. Raft's stores are still closed properly, so the data dir opens
// again. It is for tests of failover (keeltest's Kill); stopping a node on
// purpose is Close. Crash after Close, or Close after Crash, does nothing.
func (s *Node) Crash() error { return s.stop(false) }

// stop is Close, or with graceful false, Crash.
func (s *Node) stop(graceful bool) error {
	var err error
	s.closeOnce.Do(func() {
		// Not ready, and NOT_SERVING, before anything stops: load
		// balancers drain the node while it still answers.
		s.stopping.Store(true)
		s.health.Shutdown()
		close(s.stopWatch)
		if graceful {
			// A leader hands leadership on while it still serves, so
			// clients following its not-leader answers find the new leader
			// at once.
			s.ctrl.HandOff()
			stopped := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				s.grpc.Stop()
			}
		} else {
			s.grpc.Stop()
		}
		s.ctrl.Stop()
		err = errors.Join(s.node.Close(), s.mux.Close())
		s.peers.Close()
		s.wg.Wait()
		s.unregisterMetrics()
		s.log.Info("controller stopped", "node_id", s.cfg.NodeID, "graceful", graceful)
	})
	return err
}

// askPeer asks a voter how it is through its gRPC DescribeQuorum (its raft
// address is its gRPC address: they share one port), with this node's
// certificate when TLS is on.
func askPeer(tls *tlsauth.Config) func(ctx context.Context, id int32, addr string) (controller.PeerStatus, error) {
	return func(ctx context.Context, id int32, addr string) (controller.PeerStatus, error) {
		cl, err := rpc.NewClient([]string{addr}, rpc.WithTLS(tls))
		if err != nil {
			return controller.PeerStatus{}, err
		}
		defer cl.Close()
		cc, err := cl.Controller(addr)
		if err != nil {
			return controller.PeerStatus{}, err
		}
		resp, err := cc.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		if err != nil {
			return controller.PeerStatus{}, err
		}
		if resp.GetNodeId() != id {
			return controller.PeerStatus{}, fmt.Errorf("the node at %s is node %d", addr, resp.GetNodeId())
		}
		st := controller.PeerStatus{LastIndex: resp.GetLastIndex(), Ready: resp.GetReady(), NotReady: resp.GetNotReadyReason(), ClusterID: resp.GetClusterId(),
			MinMetadataVersion: resp.GetMinMetadataVersion(), MaxMetadataVersion: resp.GetMaxMetadataVersion(),
			Leads: resp.GetLeaderId() == id} // a leader knows itself as the leader
		for _, m := range resp.GetVoters() {
			st.Members = append(st.Members, m.GetId())
		}
		return st, nil
	}
}

// registerMetrics registers the port's count of connections whose peer
// has not yet authenticated, and of those refused, on cfg.Metrics.
func (s *Node) registerMetrics() error {
	if s.cfg.Metrics == nil {
		return nil
	}
	for _, col := range append(s.mux.Unauthenticated().Collectors(), s.mux.Unauthenticated().ListenerCollectors("grpc")...) {
		if err := s.cfg.Metrics.Register(col); err != nil {
			s.unregisterMetrics()
			return fmt.Errorf("register the controller's connection metrics: %v", err)
		}
		s.registered = append(s.registered, col)
	}
	return nil
}

func (s *Node) unregisterMetrics() {
	for _, col := range s.registered {
		s.cfg.Metrics.Unregister(col)
	}
	s.registered = nil
}

// verifySnapshot is raftlog's check of the newest snapshot in the data dir
// before raft restores it: the framing, every record and the SHA-256
// trailer.
func verifySnapshot(r io.Reader) error {
	_, err := fsm.VerifySnapshot(r)
	return err
}

func verifySnapshotFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return atomicfile.PathCause(err)
	}
	defer f.Close()
	_, err = fsm.VerifySnapshot(f)
	return err
}
