package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
)

// CeilingRecordsPerEntry is the number of Partition records in each entry
// of the raw raft measurement.
const CeilingRecordsPerEntry = 1000

// pipelineWindow is how many entries the pipelined raw raft measurement
// keeps in flight: enough to keep raft's pipeline full.
const pipelineWindow = 64

// Ceiling is raw hashicorp/raft's commit rate on Keel's records.
type Ceiling struct {
	// RecordsPerS commits one entry at a time, each waited for before the
	// next: the ceiling of a controller that waits for each commit before
	// the next decision, as Keel's did before it pipelined them, and the
	// rate the create scenario's target is at least.
	RecordsPerS float64
	// PipelinedRecordsPerS keeps 64 entries in flight: raft's own ceiling,
	// for reference only, as raw raft applies, decodes and pushes nothing.
	PipelinedRecordsPerS float64
}

// partitionRecords returns n Partition records of one topic over 100
// brokers, as the controller writes them for a new topic (RF 3).
func partitionRecords(n int) []*keelpb.Record {
	id := uuid.New()
	recs := make([]*keelpb.Record, n)
	for i := range recs {
		r := []int32{int32(1 + i%100), int32(1 + (i+1)%100), int32(1 + (i+2)%100)}
		recs[i] = &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: id[:], Partition: int32(i), Replicas: r, Isr: r, Leader: r[0],
		}}}
	}
	return recs
}

// nopFSM is a state machine that keeps nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                    { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error)    { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error         { return rc.Close() }
func (nopSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnapshot) Release()                          {}

type nopSnapshot struct{}

// MeasureRaftCeiling measures raw hashicorp/raft's commit rate on Keel's
// records: three raft nodes in this process, each with raft-boltdb and a
// file snapshot store in dir and a TCP transport on 127.0.0.1, Keel's raft
// timings and a no-op state machine. The leader commits entries entries,
// each an encoded batch of CeilingRecordsPerEntry Partition records
// (fsm.EncodeBatch), after a warm-up: once one at a time, once pipelined.
func MeasureRaftCeiling(ctx context.Context, dir string, entries int) (Ceiling, error) {
	var none Ceiling
	data, err := fsm.EncodeBatch(partitionRecords(CeilingRecordsPerEntry)...)
	if err != nil {
		return none, err
	}
	const n = 3
	type node struct {
		r     *raft.Raft
		store *raftboltdb.BoltStore
		trans *raft.NetworkTransport
	}
	nodes := make([]*node, 0, n)
	defer func() {
		for _, nd := range nodes {
			if nd.r != nil {
				_ = nd.r.Shutdown().Error()
			}
			_ = nd.trans.Close()
			_ = nd.store.Close()
		}
	}()
	logger := hclog.NewNullLogger()
	var conf raft.Configuration
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("raft-%d", i+1))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return none, err
		}
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(d, "raft.db")})
		if err != nil {
			return none, err
		}
		trans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, logger)
		if err != nil {
			store.Close()
			return none, err
		}
		nodes = append(nodes, &node{store: store, trans: trans})
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprint(i + 1)), Address: trans.LocalAddr()})
	}
	t := raftlog.DefaultTiming()
	for i, nd := range nodes {
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(fmt.Sprint(i + 1))
		rc.HeartbeatTimeout, rc.ElectionTimeout = t.HeartbeatTimeout, t.ElectionTimeout
		rc.LeaderLeaseTimeout, rc.CommitTimeout = t.LeaderLeaseTimeout, t.CommitTimeout
		rc.SnapshotThreshold, rc.TrailingLogs = raftlog.DefaultSnapshotThreshold, raftlog.DefaultTrailingLogs
		rc.BatchApplyCh = true
		rc.Logger = logger
		d := filepath.Join(dir, fmt.Sprintf("raft-%d", i+1))
		snaps, err := raft.NewFileSnapshotStoreWithLogger(d, 2, logger)
		if err != nil {
			return none, err
		}
		logs, err := raft.NewLogCache(512, nd.store)
		if err != nil {
			return none, err
		}
		if err := raft.BootstrapCluster(rc, logs, nd.store, snaps, nd.trans, conf); err != nil {
			return none, err
		}
		if nd.r, err = raft.NewRaft(rc, nopFSM{}, logs, nd.store, snaps, nd.trans); err != nil {
			return none, err
		}
	}
	var leader *raft.Raft
	err = poll.Wait(ctx, 30*time.Second, 5*time.Millisecond, "a raft leader", func() (bool, error) {
		for _, nd := range nodes {
			if nd.r.State() == raft.Leader {
				leader = nd.r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return none, err
	}
	commit := func(count, window int) error {
		if window == 1 {
			for range count {
				if err := leader.Apply(data, 10*time.Second).Error(); err != nil {
					return fmt.Errorf("raw raft commit: %w", err)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			return nil
		}
		// window-1 queued here, one waited for by the collector.
		inflight := make(chan raft.ApplyFuture, window-1)
		errc := make(chan error, 1)
		go func() {
			var first error
			for f := range inflight {
				if err := f.Error(); err != nil && first == nil {
					first = err
				}
			}
			errc <- first
		}()
		for range count {
			if ctx.Err() != nil {
				break
			}
			inflight <- leader.Apply(data, 10*time.Second)
		}
		close(inflight)
		if err := <-errc; err != nil {
			return fmt.Errorf("raw raft commit: %w", err)
		}
		return ctx.Err()
	}
	if err := commit(max(entries/10, 5), pipelineWindow); err != nil { // warm-up
		return none, err
	}
	rate := func(window int) (float64, error) {
		start := time.Now()
		if err := commit(entries, window); err != nil {
			return 0, err
		}
		took := time.Since(start)
		if took <= 0 {
			return 0, errors.New("raw raft commit took no time")
		}
		return float64(entries*CeilingRecordsPerEntry) / took.Seconds(), nil
	}
	var c Ceiling
	if c.RecordsPerS, err = rate(1); err != nil {
		return none, err
	}
	if c.PipelinedRecordsPerS, err = rate(pipelineWindow); err != nil {
		return none, err
	}
	return c, nil
}
