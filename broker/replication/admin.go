package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
)

// The data admin requests of Kafka's clients (DescribeLogDirs,
// DeleteRecords, DescribeProducers), answered from this broker's logs as
// Kafka's ReplicaManager answers them.

// DeleteRecords moves the log start of a partition this broker leads up to
// offset (-1: the high watermark), and returns await, which waits for every
// replica on a live broker to follow (see broker.Backend). The log start
// moves only up to the high watermark: what a consumer may not read yet is
// not the client's to delete (Kafka's maybeIncrementLogStartOffset).
func (m *Manager) DeleteRecords(topic string, partition int32, offset int64) (func(ctx context.Context) (int64, error), error) {
	r, err := m.replicaOf(topic, partition)
	if err != nil {
		return nil, err
	}
	// As Kafka holds leaderIsrUpdateLock: the log start moves under the
	// leadership it was checked for.
	r.roleMu.RLock()
	r.mu.Lock()
	if err := m.leading(r, topic, partition, -1); err != nil {
		r.mu.Unlock()
		r.roleMu.RUnlock()
		return nil, err
	}
	hw, gen := r.hw, r.gen
	r.mu.Unlock()
	to := offset
	if offset == -1 {
		to = hw
	}
	if to < 0 || to > hw {
		r.roleMu.RUnlock()
		return nil, fmt.Errorf("%w: %s/%d: cannot delete records before offset %d: it is outside [0, %d], the high watermark",
			kerr.OffsetOutOfRange, topic, partition, offset, hw)
	}
	err = r.log.DeleteTo(to)
	r.roleMu.RUnlock()
	switch {
	case errors.Is(err, partlog.ErrClosed):
		return nil, fmt.Errorf("%w: %s/%d: the replica stopped", kerr.NotLeaderForPartition, topic, partition)
	case err != nil:
		return nil, fmt.Errorf("%w: %s/%d: %v", kerr.KafkaStorageError, topic, partition, err)
	}
	m.log.Info("deleted records", "topic", topic, "partition", partition, "log_start_offset", r.log.LogStartOffset())
	r.mu.Lock()
	// Followers waiting in a fetch wake, and carry the new start home.
	r.notify()
	r.mu.Unlock()
	return func(ctx context.Context) (int64, error) {
		return m.awaitLowWatermark(ctx, r, gen, to, topic, partition)
	}, nil
}

// awaitLowWatermark waits until r's low watermark reaches to (Kafka's
// DelayedDeleteRecords): it looks once even if ctx has ended.
func (m *Manager) awaitLowWatermark(ctx context.Context, r *replica, gen uint64, to int64, topic string, partition int32) (int64, error) {
	for {
		// Taken before the look, so that an image after it wakes this.
		m.mu.Lock()
		imaged := m.imaged
		m.mu.Unlock()
		r.mu.Lock()
		if r.gen != gen {
			r.mu.Unlock()
			return -1, fmt.Errorf("%w: %s/%d: the leadership moved before the replicas deleted up to %d", kerr.NotLeaderForPartition, topic, partition, to)
		}
		if low := m.lowWatermark(r); low >= to {
			r.mu.Unlock()
			return low, nil
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-imaged:
		case <-ctx.Done():
		}
		if ctx.Err() == nil {
			continue
		}
		return -1, fmt.Errorf("%w: %s/%d: the replicas did not delete up to %d in time: %v", kerr.RequestTimedOut, topic, partition, to, ctx.Err())
	}
}

// lowWatermark is the smallest log start of the leader and of each other
// replica the partition now assigns to a live (registered, unfenced)
// broker, as its last fetch at this epoch said; -1 while one has not
// fetched (Kafka's lowWatermarkIfLeader). The caller holds r.mu.
func (m *Manager) lowWatermark(r *replica) int64 {
	img := m.img.Load()
	low := r.log.LogStartOffset()
	p, ok := img.Partition(r.tp.TopicID, r.tp.Partition)
	if !ok {
		return low
	}
	for _, id := range p.Replicas {
		if b, ok := img.Broker(id); id == m.self || !ok || b.Fenced {
			continue
		}
		f := r.followers[id]
		if f == nil {
			return -1
		}
		low = min(low, f.logStart)
	}
	return low
}

// LogDirs describes the broker's one log dir and every replica in it; a
// follower's lag is how far its log end is behind its leader's high
// watermark as the leader last said.
func (m *Manager) LogDirs() []broker.LogDir {
	path, err := filepath.Abs(m.dir)
	if err != nil {
		path = m.dir
	}
	dir := broker.LogDir{Path: path}
	dir.TotalBytes, dir.UsableBytes = diskSpace(m.dir)
	type held struct {
		r  *replica
		hw int64 // the high watermark the replica measures its lag by
	}
	m.mu.Lock()
	rs := make([]held, 0, len(m.replicas))
	for _, r := range m.replicas {
		r.mu.Lock()
		hw := r.hw
		if r.role == broker.RoleFollower {
			hw = r.leaderHW
		}
		r.mu.Unlock()
		rs = append(rs, held{r: r, hw: hw})
	}
	m.mu.Unlock()
	for _, h := range rs {
		dir.Replicas = append(dir.Replicas, broker.LogDirReplica{Topic: h.r.topic, Partition: h.r.tp.Partition,
			Size: h.r.log.Size(), OffsetLag: max(h.hw-h.r.log.LogEndOffset(), 0)})
	}
	slices.SortFunc(dir.Replicas, func(a, b broker.LogDirReplica) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return []broker.LogDir{dir}
}

// Producers lists the idempotent producers the replica here remembers,
// leader or follower (followers keep them from the replicated batch
// headers, for when they lead).
func (m *Manager) Producers(topic string, partition int32) ([]broker.ProducerState, error) {
	r, err := m.replicaOf(topic, partition)
	if err != nil {
		return nil, err
	}
	ps := r.log.Producers()
	out := make([]broker.ProducerState, len(ps))
	for i, p := range ps {
		out[i] = broker.ProducerState(p)
	}
	return out, nil
}
