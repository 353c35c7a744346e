package raftlog

import (
	"github.com/keel-dev/keel/internal/hostport"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/internal/atomicfile"
	"github.com/keel-dev/keel/tlsauth"
)

// Snapshot defaults, sized for a metadata log of up to a million
// partitions: a snapshot every 16384 entries, 10240 kept behind it.
const (
	DefaultSnapshotThreshold = 16384
	DefaultTrailingLogs      = 10240
	// DefaultSnapshotInterval is raft's own default check interval.
	DefaultSnapshotInterval = 120 * time.Second
)

const (
	raftDBFileName = "raft.db"

	logCacheSize      = 512
	snapshotsRetained = 2
	transportMaxPool  = 3
	transportTimeout  = 10 * time.Second
	// boltLockTimeout makes a second process on the same data dir fail
	// quickly instead of blocking forever on bolt's file lock.
	boltLockTimeout = time.Second
)

// Config describes one raft node.
type Config struct {
	// NodeID is this node's id (--node-id); its raft server id is ServerID(NodeID).
	NodeID int32
	// Advertise is this node's address as the voters know it. It must equal
	// this node's entry in Voters when bootstrapping.
	Advertise string
	// DataDir holds meta.json, the log store (raft.db, or wal/) and
	// snapshots/. It is created if missing.
	DataDir string
	// LogStore is the store for the raft log and stable state: LogStoreBoltDB
	// ("" means it too) or LogStoreWAL. A data dir keeps the store it was
	// created with; Open refuses the other one. See LogStoreBoltDB for the
	// layouts and for how to migrate a quorum from one to the other.
	LogStore string
	// Voters is used only to bootstrap an empty data dir; with existing raft
	// state it is ignored and the node rejoins with the configuration in its log.
	Voters []Voter
	// Join (--join) starts a node with an empty data dir without
	// bootstrapping: it has no configuration, calls no election, and waits
	// for the leader of an existing quorum to add it (AddVoter), then
	// receives the snapshot and the log from it. Voters is then not used.
	// With existing raft state Join changes nothing.
	Join bool
	// ClusterID is optional. If set and the data dir has recorded another,
	// Open fails; if the data dir has none yet, it is recorded.
	ClusterID string
	Timing    Timing
	// SnapshotThreshold is the number of new entries that triggers a
	// snapshot; 0 means 16384.
	SnapshotThreshold uint64
	// TrailingLogs is how many entries are kept behind a snapshot so that a
	// slightly lagging follower can catch up without one; 0 means 10240.
	TrailingLogs uint64
	// SnapshotInterval is how often raft checks whether SnapshotThreshold
	// has been reached; 0 means raft's default (120s).
	SnapshotInterval time.Duration
	// Logger receives raft's logs; nil means slog.Default().
	Logger *slog.Logger
	// TLS, when set, runs raft traffic over mutual TLS: both ends of every
	// connection must hold a controller certificate from its CA, and this
	// node's own must be controller-<NodeID>. Nil is plaintext.
	TLS *tlsauth.Config
	// DialAddrs (--raft-dial) are addresses at which this node dials some
	// peers instead of their addresses in the raft configuration, which stay
	// what every other node and client knows them by.
	DialAddrs map[int32]string

	// VerifySnapshot, if set, checks a snapshot the state machine wrote
	// (Keel's: fsm.VerifySnapshot), as Open checks the newest snapshot in
	// the data dir before raft restores it. Nil: raft's CRC is checked, not
	// the content.
	VerifySnapshot func(r io.Reader) error
	// AskLeaderContact asks voter id, at addr (where this node dials it),
	// what it knows of leader: its LeaderContact answer. The crash election
	// (Timing.CrashElection) needs it: it asks the other voters before it
	// deposes a leader. server wires it to the peer service's
	// LeaderContact call.
	AskLeaderContact func(ctx context.Context, id int32, addr string, leader int32) (LeaderContact, error)
	// BeforeRaft, if set, is called once the data dir has passed its own
	// checks and before raft starts (before a new data dir is
	// bootstrapped): an error it returns fails Open, changing nothing.
	// server asks the node's peers there whether its data dir was rolled
	// back (highwater.go), and answers theirs from StartState.HighWater.
	BeforeRaft func(StartState) error
	// FailStop, if set, is called instead of letting raft panic when the
	// stable store cannot store a new current term (raft cannot go on
	// without it on disk: a full or read-only disk, an I/O error). It must
	// stop the process and not return; keel controller prints one line and
	// exits. Nil: raft panics.
	FailStop func(err error)
	// SnapshotLoad, if set, tells how far a snapshot restore has read: the
	// one inside Open, before it returns, and raft's later ones.
	SnapshotLoad *SnapshotLoad
	// TestRestorePace, above zero, makes every snapshot restore read at a
	// pace that takes this long (keel controller --test-restore-pace):
	// tests see a restore in progress without a large image.
	TestRestorePace time.Duration

	// walSegmentSize is raft-wal's segment size; 0 means its default
	// (64 MiB). Tests lower it to make segments rotate.
	walSegmentSize int
	// wrapStore, if set, wraps the opened store: tests make it fail.
	wrapStore func(logStore) logStore
	// timeoutNow, if set, replaces TimeoutNow in TransferLeadership: tests
	// lose it.
	timeoutNow func(id int32, addr string) error
}

// Node is a running raft node and the stores it owns.
type Node struct {
	// Raft is the running raft instance. Node.Close shuts it down; callers
	// must not call Raft.Shutdown themselves.
	Raft *raft.Raft

	dir       string
	id        int32
	advertise string
	store     *watchedStore
	transport *raft.NetworkTransport
	stream    *streamLayer
	watched   *watchedTransport // the transport as raft sees it
	crash     *leaderCrash      // nil without Timing.CrashElection
	heard     *heardFrom        // when each leader was last heard from
	commits   commitWatch
	fsm       *fsmAdapter
	// leadership queues raft's leadership changes for LeadershipChanges.
	leadership *leadershipQueue
	// timeoutNow is TimeoutNow, or Config.timeoutNow in tests.
	timeoutNow func(id int32, addr string) error
	logger     *slog.Logger
	// highWater are the marks of highwater.go; highWaterStop ends their
	// recording, which closes highWaterDone.
	highWater     *HighWater
	highWaterStop chan struct{}
	highWaterDone chan struct{}

	mu     sync.Mutex // guards meta and closed
	meta   meta
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// Open starts a raft node on cfg.DataDir, with raft traffic on mux.
//
// It creates the data dir if missing and checks its meta file, so a data dir
// is never used by another node id or cluster; it fails fast if another
// process has the data dir open. On an empty data dir it bootstraps the
// cluster from cfg.Voters (every voter may do so with the same list; raft
// treats that as one bootstrap), or, with cfg.Join, starts without a
// configuration and waits to be added. With existing state it rejoins and
// ignores cfg.Voters and cfg.Join. Before raft starts it refuses a data dir
// that has held raft state but lost its log store, a damaged log store, a
// damaged newest snapshot and a log that no snapshot covers (checkStart),
// changing nothing in it. Every error is one line naming the problem and
// the path, and leaves nothing open. The caller keeps ownership of mux and sm.
func Open(cfg Config, sm consensus.StateMachine, mux *Mux) (*Node, error) {
	if err := checkConfig(cfg, sm, mux); err != nil {
		return nil, err
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = DefaultTrailingLogs
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	logger := newHCLogAdapter(cfg.Logger, "raft")
	logger.peers = newPeerWatch(cfg.Logger)

	m, err := prepareDataDir(cfg)
	if err != nil {
		return nil, err
	}

	// Undo in reverse on failure, so a failed Open leaves no file lock,
	// goroutine or connection behind.
	var undo []func()
	ok := false
	defer func() {
		if !ok {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	opened, err := openLogStore(m.logStore(), cfg.DataDir, cfg.NodeID, cfg.walSegmentSize, logger.Named("wal"))
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = opened.Close() })
	if cfg.wrapStore != nil {
		opened = cfg.wrapStore(opened)
	}
	info, err := checkStart(cfg.DataDir, m, cfg.NodeID, opened, cfg.VerifySnapshot)
	if err != nil {
		return nil, err
	}
	hw, err := readHighWater(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	if err := checkHighWater(cfg.DataDir, cfg.NodeID, hw, info.logPath, info.last); err != nil {
		return nil, err
	}
	held := info.held

	// The cluster id is recorded only once the committed log names it
	// (RecordClusterID): a mistyped --cluster-id must not claim the data dir.
	n := &Node{dir: cfg.DataDir, id: cfg.NodeID, advertise: cfg.Advertise, meta: m, logger: cfg.Logger,
		highWater: &HighWater{dir: cfg.DataDir, hw: hw, written: hw}}
	store := &watchedStore{logStore: opened}
	store.markState = n.markRaftState
	store.marked.Store(m.RaftState)
	n.store = store
	n.timeoutNow = n.TimeoutNow
	if cfg.timeoutNow != nil {
		n.timeoutNow = cfg.timeoutNow
	}

	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		return nil, fmt.Errorf("raft log cache: %v", err)
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, snapshotsRetained, logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("cannot open snapshot store in %s: %v", cfg.DataDir, atomicfile.PathCause(err))
	}
	snaps := newestSnapshotOnly{fileSnaps}

	guard := newPeerGuard(cfg.NodeID, cfg.DialAddrs, cfg.Logger)
	n.heard = newHeardFrom()
	if cfg.Timing.CrashElection {
		n.crash = newLeaderCrash(cfg.NodeID, cfg.Logger, cfg.Timing.crashWindow(), n.heard, func(id int32, conf raft.ServerAddress) string {
			if a, ok := cfg.DialAddrs[id]; ok {
				return a
			}
			return string(conf)
		}, func() error { return n.TimeoutNow(n.id, n.advertise) }, cfg.AskLeaderContact)
		guard.connEnded = n.crash.connEnded
		undo = append(undo, n.crash.stop)
	}
	n.stream = streamLayerFor(mux, cfg, guard)
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.stream,
		// Consulted on every dial; peers it does not know are dialled at
		// their configured address.
		ServerAddressProvider: dialAddrs(cfg.DialAddrs, cfg.NodeID, cfg.Advertise),
		MaxPool:               transportMaxPool,
		Timeout:               transportTimeout,
		Logger:                logger.Named("net"),
	})
	undo = append(undo, func() { _ = trans.Close() })
	n.transport = trans
	n.watched = newWatchedTransport(trans, &n.commits, n.heard)
	n.watched.peers = logger.peers
	undo = append(undo, n.watched.stop)

	rc := raft.DefaultConfig()
	rc.LocalID = ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	n.leadership = newLeadershipQueue()
	undo = append(undo, n.leadership.stop)
	rc.NotifyCh = n.leadership.in
	rc.Logger = logger
	rc.BatchApplyCh = true
	rc.PreVoteDisabled = false

	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("cannot read raft state in %s: %v", cfg.DataDir, err)
	}
	if cfg.BeforeRaft != nil {
		st := StartState{HeldState: hasState, LastIndex: info.last, HighWater: n.highWater}
		for _, s := range info.conf.Servers {
			if id, err := ParseServerID(s.ID); err == nil && id != cfg.NodeID && s.Suffrage == raft.Voter {
				st.Peers = append(st.Peers, Voter{ID: id, Address: string(s.Address)})
			}
		}
		if err := cfg.BeforeRaft(st); err != nil {
			return nil, err
		}
	}
	switch {
	case !hasState && cfg.Join:
		logger.Info("no raft state and --join: waiting to be added to a quorum (keel quorum add-voter)",
			"data_dir", cfg.DataDir, "node_id", cfg.NodeID, "address", cfg.Advertise)
	case !hasState:
		if err := bootstrap(cfg, rc, logs, store, snaps, n.watched, logger); err != nil {
			return nil, err
		}
		held = true
	}
	if held {
		if err := n.recordRaftState(); err != nil {
			return nil, err
		}
	}

	n.fsm = &fsmAdapter{sm: sm, load: cfg.SnapshotLoad, pace: cfg.TestRestorePace, newestSize: func() int64 {
		if l, err := snaps.List(); err == nil && len(l) > 0 {
			return l[0].Size
		}
		return 0
	}}
	// Guarded: a panic in NewRaft (a log entry checkStart did not foresee
	// missing, a term it cannot store) comes before it starts anything.
	var r *raft.Raft
	err = guarded(func() error {
		var err error
		r, err = raft.NewRaft(rc, n.fsm, logs, store, snaps, n.watched)
		return err
	})
	if err != nil {
		if rerr := n.fsm.restoreFailure(); rerr != nil {
			// checkStart verified the newest snapshot, the only one raft
			// tries (newestSnapshotOnly), yet the state machine refused it.
			path := filepath.Join(cfg.DataDir, snapshotDirName)
			if s, _, _ := listSnapshotDirs(cfg.DataDir); len(s) > 0 {
				path = filepath.Join(s[0].path, snapshotStateFileName)
			}
			return nil, fmt.Errorf("cannot restore snapshot %s (%v); %s", path, rerr, rejoinHint(cfg.NodeID))
		}
		return nil, fmt.Errorf("start raft on %s: %v", cfg.DataDir, err)
	}
	n.Raft = r
	guard.setRaft(r)
	if n.crash != nil {
		n.crash.setRaft(raftNode{r})
	}
	if cfg.FailStop != nil {
		store.failStop.Store(&cfg.FailStop)
	}
	n.highWaterStop, n.highWaterDone = make(chan struct{}), make(chan struct{})
	go n.runHighWater(n.highWaterStop, n.highWaterDone)
	ok = true
	return n, nil
}

func checkConfig(cfg Config, sm consensus.StateMachine, mux *Mux) error {
	switch {
	case sm == nil:
		return errors.New("raftlog.Open: nil StateMachine")
	case mux == nil:
		return errors.New("raftlog.Open: nil Mux")
	case mux.isClosed():
		// raft's transport would retry Accept forever, logging errors.
		return errors.New("raftlog.Open: Mux is closed")
	case cfg.NodeID <= 0:
		return fmt.Errorf("--node-id (%d) must be positive", cfg.NodeID)
	case cfg.DataDir == "":
		return errors.New("--data-dir is empty")
	case cfg.Timing.CrashElection && cfg.AskLeaderContact == nil:
		return errors.New("raftlog.Open: Timing.CrashElection needs AskLeaderContact")
	}
	if err := CheckLogStore(cfg.LogStore); err != nil {
		return err
	}
	if err := hostport.Check(cfg.Advertise); err != nil {
		return fmt.Errorf("advertised address: %v", err)
	}
	if err := checkTLS(cfg); err != nil {
		return err
	}
	return cfg.Timing.Validate()
}

// prepareDataDir makes sure DataDir is a directory that belongs to this node
// (and cluster) and holds cfg.LogStore, writing the meta file on first use.
func prepareDataDir(cfg Config) (meta, error) {
	dir := cfg.DataDir
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return meta{}, fmt.Errorf("cannot create data dir %s: %v", dir, atomicfile.PathCause(err))
		}
	case err != nil:
		return meta{}, fmt.Errorf("cannot read data dir %s: %v", dir, atomicfile.PathCause(err))
	case !fi.IsDir():
		return meta{}, fmt.Errorf("data dir %s is not a directory", dir)
	}

	m, found, err := readMeta(dir)
	if err != nil {
		return meta{}, err
	}
	if found {
		if m.NodeID != cfg.NodeID {
			return meta{}, fmt.Errorf("data dir %s belongs to node %d, not node %d", dir, m.NodeID, cfg.NodeID)
		}
		if cfg.ClusterID != "" && m.ClusterID != "" && m.ClusterID != cfg.ClusterID {
			return meta{}, fmt.Errorf("data dir %s belongs to cluster %s, not %s", dir, m.ClusterID, cfg.ClusterID)
		}
		// Opening the other store would find it empty and bootstrap: the
		// node would forget its log and its vote.
		if have, want := m.logStore(), logStoreOrDefault(cfg.LogStore); have != want {
			return meta{}, fmt.Errorf("data dir %s holds a %s raft log, not --log-store %s; to switch, start the node on an empty data dir and let it rejoin",
				dir, have, want)
		}
		// Checked before the store is opened, which would create it.
		if err := checkStoreExists(dir, m, cfg.NodeID); err != nil {
			return meta{}, err
		}
		return m, nil
	}

	// No meta but a raft log: we cannot tell whose log it is, and guessing
	// wrong would let a node rejoin as someone else.
	for _, name := range []string{raftDBFileName, walDirName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return meta{}, fmt.Errorf("data dir %s has %s but no %s; refusing to guess which node it belongs to",
				dir, name, metaFileName)
		}
	}
	// Written before the raft store exists, so a crash in between leaves a
	// data dir that still opens.
	m = newMeta(cfg.NodeID, cfg.LogStore)
	if err := writeMeta(dir, m); err != nil {
		return meta{}, err
	}
	return m, nil
}

// bootstrap writes the initial configuration to an empty store. Only this
// node's own entry is checked against cfg: the rest of the list is the
// operator's to get right, and raft rejects duplicates itself.
func bootstrap(cfg Config, rc *raft.Config, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport, logger *hclogAdapter,
) error {
	if len(cfg.Voters) == 0 {
		return fmt.Errorf("data dir %s has no raft state and --voters is empty: cannot bootstrap", cfg.DataDir)
	}
	self, err := FindVoter(cfg.Voters, cfg.NodeID)
	if err != nil {
		return err
	}
	if self.Address != cfg.Advertise {
		return fmt.Errorf("--voters gives node %d address %s, but it listens as %s", cfg.NodeID, self.Address, cfg.Advertise)
	}
	var conf raft.Configuration
	for _, v := range cfg.Voters {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       ServerID(v.ID),
			Address:  raft.ServerAddress(v.Address),
		})
	}
	logger.Info("bootstrapping new cluster", "data_dir", cfg.DataDir, "voters", len(conf.Servers))
	err = raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf)
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap raft in %s: %v", cfg.DataDir, err)
	}
	return nil
}

// Close shuts raft down and waits for it, then closes the transport (and
// every raft connection) and the raft store, releasing the data dir. It does
// not close the Mux, which the caller owns. Close is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		if n.crash != nil {
			n.crash.stop()
		}
		// The marks as of a clean stop, while raft still knows its leader
		// and its followers' progress.
		close(n.highWaterStop)
		<-n.highWaterDone
		n.recordHighWater()
		var errs []error
		if err := n.Raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
		n.watched.stop()
		n.leadership.stop()
		// Raft's shutdown closes the transport already; this keeps Close
		// correct should that change.
		if err := n.transport.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft transport: %w", err))
		}
		// A heartbeat from a peer that raft's transport was handling as it
		// shut down may still write a term to the store: let it finish.
		if !n.stream.waitHandlers(transportTimeout) {
			errs = append(errs, fmt.Errorf("raft connection handlers still running %v after shutdown; closing the raft store under them", transportTimeout))
		}
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft store: %w", err))
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// ClusterID returns the cluster id recorded in the data dir, or "" until one
// is recorded.
func (n *Node) ClusterID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.meta.ClusterID
}

// RecordClusterID persists the cluster id in the meta file once it is known,
// replacing the file atomically. Recording the id already recorded is a
// no-op; recording a different one fails, as does recording on a closed node
// (the data dir may belong to another process by then).
func (n *Node) RecordClusterID(id string) error {
	if id == "" {
		return errors.New("cannot record an empty cluster id")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.meta.ClusterID == id:
		return nil
	case n.meta.ClusterID != "":
		return fmt.Errorf("data dir %s belongs to cluster %s, not %s", n.dir, n.meta.ClusterID, id)
	case n.closed:
		return fmt.Errorf("cannot record cluster id in %s: node is closed", n.dir)
	}
	m := n.meta
	m.ClusterID = id
	if err := writeMeta(n.dir, m); err != nil {
		return err
	}
	n.meta = m
	return nil
}

// TimeoutNow tells voter id at addr to start an election at once, as raft
// does at the end of a leadership transfer (the voter skips its pre-vote,
// and the others grant it their vote though they have a leader). It goes
// over raft's own transport, in this node's name; it returns once the voter
// has answered, or after the transport's timeout.
func (n *Node) TimeoutNow(id int32, addr string) error {
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(ServerID(n.id)),
		Addr:            []byte(n.advertise),
	}}
	var resp raft.TimeoutNowResponse
	return n.transport.TimeoutNow(ServerID(id), raft.ServerAddress(addr), req, &resp)
}

// markRaftState is recordRaftState for the store's first successful
// write. It is tried once: should the meta file not be written, Open
// records it at the next start, as the store then holds state.
func (n *Node) markRaftState() {
	n.store.marked.Store(true)
	if err := n.recordRaftState(); err != nil {
		n.logger.Warn("cannot record in the meta file that the data dir holds raft state; it is recorded at the next start", "err", err)
	}
}

// recordRaftState marks the data dir as having held raft state (meta's
// RaftState), once, so that it never starts without its store again.
func (n *Node) recordRaftState() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.meta.RaftState {
		return nil
	}
	m := n.meta
	m.RaftState = true
	if err := writeMeta(n.dir, m); err != nil {
		return err
	}
	n.meta = m
	return nil
}

// StorageErrors counts the raft log and stable store's failed reads and
// writes since the node started ("not found" is not a failure).
func (n *Node) StorageErrors() uint64 { return n.store.errors.Load() }

// CrashElections counts the elections this node started at once because
// the leader's process was gone (Timing.CrashElection).
func (n *Node) CrashElections() uint64 {
	if n.crash == nil {
		return 0
	}
	return n.crash.elected.Load()
}

// CrashElectionVetoes counts the looks at a leader whose connection ended
// that started no election, for reason (one of CrashVetoReasons).
func (n *Node) CrashElectionVetoes(reason string) uint64 {
	i := slices.Index(CrashVetoReasons[:], reason)
	if n.crash == nil || i < 0 {
		return 0
	}
	return n.crash.vetoes[i].Load()
}

// LeaderContact is this node's answer to another voter's crash election
// about leader: its raft term and state, the leader it follows, how long
// ago a request that only a leader sends last arrived from leader, and its
// last log entry. It is answered whether or not this node's own crash
// election is on.
func (n *Node) LeaderContact(leader int32) LeaderContact {
	return contactOf(raftNode{n.Raft}, n.id, n.heard.last(leader), time.Now())
}

// StorageFailure reports when the raft log or stable store last failed,
// and with what error, or a zero time if no write has failed since the
// last one that succeeded.
func (n *Node) StorageFailure() (time.Time, error) { return n.store.Failure() }

// LeaderCommit reports the oldest commit index a leader has announced to
// this node that is above applied, and how long ago it was announced: how
// long this node has been behind the leader, as it knows it (see
// commitWatch). It is 0 when applied reaches every index announced. The
// caller passes how far its state machine has got (StateMachineIndex, or
// further after a snapshot restore).
func (n *Node) LeaderCommit(applied uint64) (index uint64, behindFor time.Duration) {
	return n.commits.oldestAbove(applied, time.Now())
}

// DataDir returns the node's data dir.
func (n *Node) DataDir() string { return n.dir }

// StateMachineIndex is the index of the last entry the state machine has
// finished with since this process started: a command it applied or refused,
// or a configuration change, and the raft-internal entries raft applied
// right after it (a term's no-op, the barriers the active controller
// confirms its leadership with), which never reach the state machine and
// so hold nothing for it to apply. Unlike raft's AppliedIndex, which moves
// when raft hands entries over, it moves only once they are applied. A
// snapshot restore does not move it: compare it with the state machine's
// own position too.
func (n *Node) StateMachineIndex() uint64 {
	done := n.fsm.done.Load()
	applied := n.Raft.AppliedIndex()
	// A barrier follows every confirmation round and a no-op every
	// election, so only a few such entries ever trail the last command:
	// look at no more than that.
	for i := done + 1; i <= applied && i <= done+internalEntriesScan; i++ {
		var l raft.Log
		if n.store.GetLog(i, &l) != nil || l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			break // not found (compacted), or the state machine's to apply
		}
		done = i
	}
	return done
}

// internalEntriesScan bounds how many raft-internal entries
// StateMachineIndex looks past.
const internalEntriesScan = 16
