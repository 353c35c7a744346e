package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/controller"
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
		"how long a leader stays leader without reaching a quorum (at most --raft-heartbeat-timeout)")
	fs.DurationVar(&t.CommitTimeout, "raft-commit-timeout", t.CommitTimeout,
		"how long the leader may delay telling followers the commit index when idle")
}

func newControllerCmd(g *globalFlags) *cobra.Command {
	cfg := server.ControllerConfig{Timing: raftlog.DefaultTiming()}
	var nodeID int32
	var voters, raftDial, metricsAddr string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run one controller node of the quorum",
		Long: `Run one controller node. Raft and gRPC share the --listen port.

On first start with an empty --data-dir the node bootstraps the quorum from
--voters (give every node the same list); afterwards it rejoins from its data
dir and --voters is ignored.`,
		Example: `  keel controller --node-id 1 --listen 127.0.0.1:9091 --data-dir /var/lib/keel/1 \
    --voters 1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093`,
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
			if err := raftlog.CheckLogStore(cfg.LogStore); err != nil {
				return err // it names --log-store
			}
			vs, err := raftlog.ParseVoters(voters) // its errors name --voters
			if err != nil {
				return err
			}
			if cfg.RaftDial, err = raftlog.ParseRaftDial(raftDial); err != nil {
				return err // it names --raft-dial
			}
			if cfg.TLS, err = tlsFlags(cmd); err != nil {
				return err // it names the flag and the file
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.NodeID, cfg.Voters, cfg.Logger, cfg.Version = nodeID, vs, log, buildVersion()
			stopMetrics, err := startMetrics(metricsAddr, log)
			if err != nil {
				return err
			}
			defer stopMetrics() // after the node has closed
			// Catch signals before starting, so a stop during a slow start
			// (waiting for the data dir's lock) still ends cleanly.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			node, err := server.StartController(cfg)
			if err != nil {
				return err
			}
			select {
			case sig := <-sigs:
				log.Info("stopping", "signal", sig.String())
				return node.Close()
			case err := <-node.Fatal():
				node.Close()
				return err
			}
		},
	}
	f := cmd.Flags()
	f.Int32Var(&nodeID, "node-id", 0, "this node's id: a positive integer, one of the ids in --voters (required)")
	f.StringVar(&cfg.Listen, "listen", "", "address to listen on for raft and gRPC (default: this node's address in --voters)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the raft log, snapshots and node metadata (required)")
	f.StringVar(&voters, "voters", "", "the initial quorum, id@host:port,... (required on first start)")
	f.StringVar(&raftDial, "raft-dial", "", "dial these peers' raft traffic at other addresses than the voter list's (a proxy, NAT), id@host:port,...; empty: none")
	f.StringVar(&cfg.RestoreFrom, "restore-from", "", "start a brand-new quorum (empty data dirs) from this snapshot file, given to every voter; ignored once the cluster has state")
	f.StringVar(&cfg.ClusterID, "cluster-id", "", "cluster id for a new cluster (default: a random UUID); a data dir of another cluster is refused")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", defaultWriteTimeout, "how long a write may wait to commit before it fails with Unavailable")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", controller.DefaultSessionTimeout, "how long a broker may go without a heartbeat before it is fenced")
	f.DurationVar(&cfg.LeaderImbalanceCheckInterval, "leader-imbalance-check-interval", controller.DefaultLeaderImbalanceCheckInterval,
		"how often to restore preferred leaders on brokers leading under 90% of them (negative: never)")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", raftlog.DefaultSnapshotThreshold,
		"take a raft snapshot (and truncate the log behind it) after this many new log entries")
	f.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", raftlog.DefaultSnapshotInterval,
		"how often to check whether --snapshot-threshold has been reached")
	f.Uint64Var(&cfg.TrailingLogs, "trailing-logs", raftlog.DefaultTrailingLogs,
		"log entries kept behind a snapshot, so a slightly lagging follower catches up without a snapshot install")
	f.StringVar(&cfg.LogStore, "log-store", raftlog.LogStoreBoltDB,
		"raft log store: boltdb (raft.db) or wal (raft-wal, in wal/); a data dir keeps the store it was created with")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (and pprof at /debug/pprof/); empty: off")
	addRaftTimingFlags(f, &cfg.Timing)
	return cmd
}
