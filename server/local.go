package server

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/keel-dev/keel/raftlog"
)

// LocalQuorum is n controllers in this process on free loopback ports: the
// cluster of `keel dev`, benchmarks and in-process tests.
type LocalQuorum struct {
	Nodes []*Node
}

// StartLocalQuorum binds n free loopback ports first (the voter list needs
// them all), then starts a controller on each with its data under dataDir.
func StartLocalQuorum(n int, dataDir string, timing raftlog.Timing, version string, log *slog.Logger) (*LocalQuorum, error) {
	return StartLocalQuorumWith(n, dataDir, timing, version, log, nil)
}

// StartLocalQuorumWith is StartLocalQuorum with each node's config adjusted
// by tune (when not nil) before it starts.
func StartLocalQuorumWith(n int, dataDir string, timing raftlog.Timing, version string, log *slog.Logger, tune func(*NodeConfig)) (*LocalQuorum, error) {
	return StartLocalQuorumAt(make([]string, n), dataDir, timing, version, log, tune)
}

// StartLocalQuorumAt is StartLocalQuorumWith with node i+1 listening on
// addrs[i], or on a free loopback port where addrs[i] is "". A quorum
// restarted on its data dir needs its old addresses: they are in raft's
// configuration, and a node on a new port is never reached by the others.
// An address that cannot be bound fails with an error naming the node.
func StartLocalQuorumAt(addrs []string, dataDir string, timing raftlog.Timing, version string, log *slog.Logger, tune func(*NodeConfig)) (*LocalQuorum, error) {
	n := len(addrs)
	muxes := make([]*raftlog.Mux, n)
	voters := make([]raftlog.Voter, n)
	for i := range muxes {
		addr := addrs[i]
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		m, err := raftlog.Listen(addr)
		if err != nil {
			for _, m := range muxes[:i] {
				m.Close()
			}
			return nil, fmt.Errorf("controller %d: %w", i+1, err)
		}
		muxes[i] = m
		voters[i] = raftlog.Voter{ID: int32(i + 1), Address: m.Addr().String()}
	}
	cfgs := make([]NodeConfig, n)
	for i, v := range voters {
		cfgs[i] = NodeConfig{
			NodeID:  v.ID,
			DataDir: filepath.Join(dataDir, fmt.Sprintf("controller-%d", v.ID)),
			Voters:  voters,
			Timing:  timing,
			Version: version,
			Logger:  log.With("node", v.ID),
			Mux:     muxes[i],
		}
		if tune != nil {
			tune(&cfgs[i])
		}
	}
	// Side by side: a node restarted on its data dir asks the others what
	// they saw it hold before its raft starts (rollback.go), and they
	// answer only once they are starting too.
	nodes := make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = StartNode(cfgs[i]) // closes its mux if it fails
		}()
	}
	wg.Wait()
	q := &LocalQuorum{}
	for _, node := range nodes {
		if node != nil {
			q.Nodes = append(q.Nodes, node)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, q.Close())
	}
	return q, nil
}

// Addrs lists the controllers' addresses.
func (q *LocalQuorum) Addrs() []string {
	out := make([]string, len(q.Nodes))
	for i, n := range q.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// Active returns the active controller, or nil when there is none.
func (q *LocalQuorum) Active() *Node {
	for _, n := range q.Nodes {
		if ok, _ := n.Controller().Active(); ok {
			return n
		}
	}
	return nil
}

// Close stops every node.
func (q *LocalQuorum) Close() error {
	var errs []error
	for _, n := range q.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
