package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/metrics"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

// addRaftTimingFlags binds the raft timing flags to t (whose values are the defaults).
func addRaftTimingFlags(fs *pflag.FlagSet, t *raftlog.Timing) {
	fs.DurationVar(&t.HeartbeatTimeout, "raft-heartbeat-timeout", t.HeartbeatTimeout,
		"how long a follower waits without hearing from the leader before it calls an election")
	fs.DurationVar(&t.ElectionTimeout, "raft-election-timeout", t.ElectionTimeout,
		"how long a candidate waits for votes before it tries again")
	fs.DurationVar(&t.LeaderLeaseTimeout, "raft-leader-lease-timeout", t.LeaderLeaseTimeout,
		"how long a leader stays leader without a quorum (at most --raft-heartbeat-timeout)")
	fs.DurationVar(&t.CommitTimeout, "raft-commit-timeout", t.CommitTimeout,
		"how long the leader may delay telling followers the commit index when idle")
	fs.BoolVar(&t.CrashElection, "raft-crash-election", t.CrashElection,
		"when the leader's process dies, elect after --raft-crash-confirm, not --raft-heartbeat-timeout")
	fs.DurationVar(&t.CrashConfirm, "raft-crash-confirm", t.CrashConfirm,
		"how long the crash election confirms the leader is gone; at least 2/5 of --raft-heartbeat-timeout")
}

func newControllerCmd(g *globalFlags) *cobra.Command {
	cfg := server.NodeConfig{Timing: raftlog.DefaultTiming()}
	var nodeID int32
	var voters, raftDial, metricsAddr string
	var insecure, pprof, consoleOn bool
	var conns connFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run one controller node of the quorum",
		Long: `Run one controller node. Raft and gRPC share the --listen port.

On first start with an empty --data-dir the node bootstraps the quorum from
--voters (give every node the same list); afterwards it rejoins from its data
dir and --voters is ignored.

With --join and an empty --data-dir the node bootstraps nothing: it waits for
a running quorum to add it (keel quorum add-voter ID ADDR), then receives the
snapshot and the log. Its address is --listen (or its entry in --voters, if
given). Keep --join on a joined node's command line; with state in its data
dir it changes nothing. A node removed from the quorum (keel quorum
remove-voter) notices within a few seconds and exits with status 0.

With --tls-cert, --tls-key and --tls-ca (keel cert makes them) raft and gRPC
are mutual TLS. Without them the node runs plaintext, trusting everyone who
can reach its port, and so refuses to start unless every address it listens
on, advertises and dials (--listen, --voters, --raft-dial, --metrics-addr) is
loopback, or --insecure says plaintext is meant.`,
		Example: `  keel controller --node-id 1 --listen 127.0.0.1:9192 --data-dir /var/lib/keel/1 \
    --voters 1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194

  # a fourth controller, then: keel quorum add-voter 4 127.0.0.1:9195
  keel controller --node-id 4 --listen 127.0.0.1:9195 --data-dir /var/lib/keel/4 --join`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeID <= 0 {
				return fmt.Errorf("--node-id is required and must be a positive integer")
			}
			if cfg.DataDir == "" {
				return fmt.Errorf("--data-dir is required")
			}
			if cfg.SnapshotThreshold == 0 {
				return fmt.Errorf("--snapshot-threshold must be at least 1")
			}
			if cfg.TrailingLogs == 0 {
				return fmt.Errorf("--trailing-logs must be at least 1")
			}
			if cfg.SnapshotInterval <= 0 {
				return fmt.Errorf("--snapshot-interval must be positive")
			}
			if cfg.CrashGrace < 0 {
				return fmt.Errorf("--crash-grace must not be negative (0 turns crash detection off)")
			}
			switch {
			case cfg.RollbackCheckWait < 0:
				return fmt.Errorf("--rollback-check-wait must not be negative (0 turns the check off)")
			case cfg.RollbackCheckWait == 0:
				cfg.RollbackCheckWait = -1 // server's "off"
			}
			if err := raftlog.CheckLogStore(cfg.LogStore); err != nil {
				return err // it names --log-store
			}
			if err := checkMetadataVersions(cfg.InitialMetadataVersion, cfg.MaxMetadataVersion); err != nil {
				return err
			}
			if err := checkCallLimits(cfg.Limits); err != nil {
				return err
			}
			if cfg.Join && cfg.RestoreFrom != "" {
				return fmt.Errorf("--join and --restore-from: --restore-from starts a new quorum, --join joins a running one")
			}
			var vs []raftlog.Voter
			var err error
			if !cfg.Join || strings.TrimSpace(voters) != "" {
				if vs, err = raftlog.ParseVoters(voters); err != nil {
					return err // it names --voters
				}
			}
			if cfg.RaftDial, err = raftlog.ParseRaftDial(raftDial); err != nil {
				return err // it names --raft-dial
			}
			exposed, err := checkPlaintext(tlsGiven(cmd), insecure, controllerAddrs(cfg.Listen, vs, cfg.RaftDial, metricsAddr))
			if err != nil {
				return err
			}
			if cfg.TLS, err = tlsFlags(cmd); err != nil {
				return err // it names the flag and the file
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.NodeID, cfg.Voters, cfg.Logger, cfg.Version = nodeID, vs, log, buildVersion()
			cfg.FailStop = failStop
			plan, err := conns.plan(weightCtrlPort, metricsAddr != "", false)
			if err != nil {
				return err
			}
			cfg.Conns = plan.port
			metricsSrv, err := startMetrics(metricsOptions{addr: metricsAddr, pprof: pprof, tls: cfg.TLS, conns: plan.metrics, console: consoleMode(consoleOn)}, log)
			if err != nil {
				return err
			}
			defer metricsSrv.stop() // after the node has closed
			cfg.Metrics = metricsSrv.registerer()
			// Catch signals before starting, so a stop during a slow start
			// (waiting for the data dir's lock) still ends cleanly.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			node, err := server.StartNode(cfg)
			if err != nil {
				return err
			}
			if cfg.TLS == nil {
				// Said once started, so that a refused start stays one line.
				logPlaintext(log, insecure, exposed)
			}
			metricsSrv.setReady(node.Ready)
			metricsSrv.attachConsole(node.LocalReads())
			select {
			case sig := <-sigs:
				log.Info("stopping", "signal", sig.String())
				return node.Close()
			case err := <-node.Fatal():
				node.Close()
				if errors.Is(err, controller.ErrRemoved) {
					// What remove-voter asked for: not a failure.
					log.Warn("stopped: removed from the quorum; to add it back, start it with an empty --data-dir and --join, then keel quorum add-voter",
						"reason", err.Error())
					return nil
				}
				return err
			}
		},
	}
	f := cmd.Flags()
	f.Int32Var(&nodeID, "node-id", 0, "this node's id, one of --voters' unless --join (required)")
	f.StringVar(&cfg.Listen, "listen", "", "address to listen on for raft and gRPC (default: this node's address in --voters)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the raft log, snapshots and node metadata (required)")
	f.StringVar(&voters, "voters", "", "the initial quorum, id@host:port,... (required on first start, unless --join)")
	f.BoolVar(&cfg.Join, "join", false, "with an empty --data-dir, bootstrap nothing and wait to be added (keel quorum add-voter)")
	f.StringVar(&raftDial, "raft-dial", "", "dial these peers' raft traffic at other addresses than --voters' (a proxy, NAT), id@host:port,...")
	f.StringVar(&cfg.RestoreFrom, "restore-from", "", "start a new quorum from this snapshot file, given to every voter; ignored once the cluster has state")
	f.Uint32Var(&cfg.InitialMetadataVersion, "initial-metadata-version", fsm.MaxMetadataVersion,
		"the metadata.version a new cluster starts at; ignored once the cluster has state")
	addTestMaxMetadataVersionFlag(f, &cfg.MaxMetadataVersion)
	f.DurationVar(&cfg.TestRestorePace, "test-restore-pace", 0, "for Keel's own tests: read every snapshot restore slowly enough to take this long")
	_ = f.MarkHidden("test-restore-pace")
	f.StringVar(&cfg.ClusterID, "cluster-id", "", "cluster id for a new cluster (default: a random UUID)")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", defaultWriteTimeout, "how long a write may wait to commit before it fails with Unavailable")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", controller.DefaultSessionTimeout, "how long a broker may go without a heartbeat before it is fenced")
	f.DurationVar(&cfg.CrashGrace, "crash-grace", controller.DefaultCrashGrace,
		"fence a broker whose process died after this long, not --session-timeout; 0: off")
	f.DurationVar(&cfg.RollbackCheckWait, "rollback-check-wait", server.DefaultRollbackCheckWait,
		"at start, how long to ask the other voters whether this data dir was rolled back; 0: do not ask")
	f.DurationVar(&cfg.LeaderImbalanceCheckInterval, "leader-imbalance-check-interval", controller.DefaultLeaderImbalanceCheckInterval,
		"how often to restore preferred leaders on brokers leading under 90% of them (negative: never)")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", raftlog.DefaultSnapshotThreshold,
		"take a raft snapshot after this many new log entries")
	f.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", raftlog.DefaultSnapshotInterval,
		"how often to check whether --snapshot-threshold has been reached")
	f.Uint64Var(&cfg.TrailingLogs, "trailing-logs", raftlog.DefaultTrailingLogs,
		"log entries kept behind a snapshot, for lagging followers to catch up from")
	f.StringVar(&cfg.LogStore, "log-store", raftlog.LogStoreBoltDB,
		"raft log store: boltdb (raft.db) or wal (wal/); a data dir keeps its store")
	addMetricsFlags(cmd, &metricsAddr, &pprof)
	addConsoleFlag(cmd, &consoleOn)
	addInsecureFlag(cmd, &insecure)
	addRaftTimingFlags(f, &cfg.Timing)
	conns.add(cmd, false)
	addControllerCallLimitFlags(f, &cfg.Limits)
	return cmd
}

// controllerAddrs are the addresses a controller listens on, advertises and
// dials, as its flags give them: --listen, every --voters address (its own
// among them), every --raft-dial address (by id), --metrics-addr.
func controllerAddrs(listen string, voters []raftlog.Voter, raftDial map[int32]string, metricsAddr string) []flagAddr {
	addrs := []flagAddr{{flag: "--listen", addr: listen}}
	for _, v := range voters {
		addrs = append(addrs, flagAddr{flag: "--voters", id: v.ID, addr: v.Address})
	}
	for _, id := range slices.Sorted(maps.Keys(raftDial)) {
		addrs = append(addrs, flagAddr{flag: "--raft-dial", id: id, addr: raftDial[id]})
	}
	return append(addrs, flagAddr{flag: "--metrics-addr", addr: metrics.ListenAddr(metricsAddr)})
}

// failStop ends the process when raft cannot store a new term (a full or
// read-only disk): raft must not go on, and would panic. It says why in one
// line, as main does for any error, and exits 1 without the clean stop,
// which would need raft.
func failStop(err error) {
	fmt.Fprintln(os.Stderr, "keel:", errorLine(err))
	os.Exit(1)
}
