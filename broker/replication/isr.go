package replication

import (
	"context"
	"slices"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// alterState is a led partition's ISR change in progress: queued to be
// sent, or answered and waiting (wait) before another is decided.
type alterState struct {
	queued  bool
	waiting bool
	wait    broker.ISRWait
}

// maybeAlter queues an ISR change for a led partition if one is due and
// none is in progress. The caller holds r.mu.
func (m *Manager) maybeAlter(r *replica, now time.Time) {
	if r.role != broker.RoleLeader || r.alter.queued || r.sending {
		return
	}
	img := m.img.Load()
	p, ok := img.Partition(r.tp.TopicID, r.tp.Partition)
	// The image may be a batch ahead of the role calls; they follow at once.
	if !ok || p.Leader != m.self || p.LeaderEpoch != r.leaderEpoch {
		return
	}
	if r.alter.waiting {
		if !r.alter.wait.Lifted(p, img, now) {
			return
		}
		r.alter, r.inflight = alterState{}, nil
		m.alterMu.Lock()
		delete(m.waiting, r.tp)
		m.alterMu.Unlock()
	}
	if isr, _ := m.desiredISR(p, r, img, now); isr == nil {
		return
	}
	r.alter.queued = true
	m.alterMu.Lock()
	m.queue = append(m.queue, r.tp)
	m.alterMu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// desiredISR is the ISR the leader wants, with each member's broker epoch,
// or nil when it wants the current one (Kafka's maybeExpandIsr and
// maybeShrinkIsr): the ISR without members that have not caught up for
// ReplicaLagTimeMax or may not be in it, plus the replicas that have
// caught up. A recovering partition wants an AlterPartition even with its
// ISR unchanged, to confirm its recovery (KIP-704: its leader has nothing to
// recover, as Kafka's leaders today). Nothing is wanted while this broker
// itself may not lead (fenced or in controlled shutdown). The caller holds
// r.mu.
func (m *Manager) desiredISR(p *fsm.Partition, r *replica, img *fsm.Image, now time.Time) ([]int32, []int64) {
	eligible := func(id int32) bool {
		b, ok := img.Broker(id)
		return ok && b.Eligible()
	}
	if !eligible(m.self) {
		return nil, nil
	}
	isr := make([]int32, 0, len(p.Replicas))
	for _, id := range p.ISR {
		if id == m.self || (eligible(id) && !m.lagging(r, id, now)) {
			isr = append(isr, id)
		}
	}
	for _, id := range p.Replicas {
		if id != m.self && !p.InISR(id) && m.inSync(r, id, img, now) {
			isr = append(isr, id)
		}
	}
	if slices.Equal(isr, p.ISR) && !p.Recovering() {
		return nil, nil
	}
	epochs := make([]int64, len(isr))
	for i, id := range isr {
		if f := r.followers[id]; f != nil && f.brokerEpoch > 0 {
			epochs[i] = f.brokerEpoch
		} else if b, ok := img.Broker(id); ok {
			epochs[i] = b.Epoch
		}
	}
	return isr, epochs
}

// lagging: an ISR member has not caught up for ReplicaLagTimeMax: it has
// not had everything the leader had within that time (Kafka's isCaughtUp,
// negated). Unlike Kafka, a follower whose log end is the leader's but that
// has stopped fetching lags too: a fetch at the log end counts as catching
// up, so a live follower of an idle partition is caught up at every fetch,
// and one that is silent (hung, cut off) leaves the ISR instead of holding
// the high watermark of the next produce.
func (m *Manager) lagging(r *replica, id int32, now time.Time) bool {
	last := r.since
	if f := r.followers[id]; f != nil && f.lastCaughtUp.After(last) {
		last = f.lastCaughtUp
	}
	return now.Sub(last) > m.cfg.ReplicaLagTimeMax
}

// inSync: a replica outside the ISR may join it (Kafka's isFollowerInSync
// and isReplicaIsrEligible): it has fetched at this epoch up to the high
// watermark and the start of this epoch (KAFKA-7128), its broker is
// eligible, and it fetched at the broker epoch the metadata shows
// (KIP-903). And it has caught up with the leader at a fetch within
// ReplicaLagTimeMax, so that lagging would not drop it at once: Kafka
// decides at the fetch itself, but this leader decides later too (at each
// lag check and each new image), when the fetches it knows may be from
// before the follower left. Without that, a follower that could not fetch
// but still heartbeated (so stayed eligible), at the log end of an idle
// partition, rejoined at once on its old fetches and left again at the
// next look: the ISR changed at every commit for as long as it could not
// fetch. With it, a follower leaves the ISR for lag at most once per
// ReplicaLagTimeMax, and rejoins only by a fetch after it left.
func (m *Manager) inSync(r *replica, id int32, img *fsm.Image, now time.Time) bool {
	f := r.followers[id]
	if f == nil || !f.fetched || f.leo < r.hw || f.leo < r.epochStart || now.Sub(f.lastCaughtUp) > m.cfg.ReplicaLagTimeMax {
		return false
	}
	b, ok := img.Broker(id)
	return ok && b.Eligible() && (f.brokerEpoch == 0 || f.brokerEpoch == b.Epoch)
}

// checkLag looks at every led partition: ISR members that fell behind go,
// and changes that waited for a retry time may go on.
func (m *Manager) checkLag() {
	now := m.clock.Now()
	for _, r := range m.logs() {
		r.mu.Lock()
		if r.role == broker.RoleLeader {
			m.maybeAlter(r, now)
		}
		r.mu.Unlock()
	}
}

func (m *Manager) runSender() {
	defer m.wg.Done()
	for {
		for m.ctx.Err() == nil && m.sendOne(m.ctx) {
		}
		select {
		case <-m.ctx.Done():
			return
		case <-m.wake:
		}
	}
}

// sendOne sends the first queued ISR change, decided afresh from the latest
// image, and handles the answer. It reports whether the queue had one.
func (m *Manager) sendOne(ctx context.Context) bool {
	m.alterMu.Lock()
	if len(m.queue) == 0 {
		m.alterMu.Unlock()
		return false
	}
	tp := m.queue[0]
	m.queue = slices.Delete(m.queue, 0, 1)
	m.alterMu.Unlock()
	m.mu.Lock()
	r := m.replicas[tp]
	m.mu.Unlock()
	if r == nil {
		return true
	}
	r.mu.Lock()
	if !r.alter.queued {
		r.mu.Unlock()
		return true
	}
	r.alter.queued = false
	img := m.img.Load()
	p, ok := img.Partition(tp.TopicID, tp.Partition)
	if r.role != broker.RoleLeader || !ok || p.Leader != m.self || p.LeaderEpoch != r.leaderEpoch {
		r.mu.Unlock()
		return true
	}
	isr, epochs := m.desiredISR(p, r, img, m.clock.Now())
	if isr == nil {
		r.mu.Unlock()
		return true
	}
	change := broker.ISRChange{TopicID: tp.TopicID, Partition: tp.Partition, LeaderEpoch: r.leaderEpoch,
		PartitionEpoch: p.PartitionEpoch, ISR: isr, BrokerEpochs: epochs}
	r.sending, r.inflight = true, isr
	gen, sentAt := r.gen, img.Offset
	m.log.Info("changing ISR", "topic", r.topic, "partition", tp.Partition, "isr", p.ISR, "new_isr", isr,
		"leader_epoch", change.LeaderEpoch, "partition_epoch", change.PartitionEpoch, "high_watermark", r.hw)
	r.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, broker.AlterPartitionTimeout)
	desc, err := m.link.AlterPartition(actx, change)
	cancel()

	m.mu.Lock()
	cur := m.replicas[tp]
	m.mu.Unlock()
	r.mu.Lock()
	r.sending = false
	if err != nil {
		r.inflight = nil
	}
	// On success the members it adds keep holding the high watermark back
	// until the metadata shows them in the ISR (the wait is lifted).
	switch {
	case cur == r && r.gen == gen:
		m.answered(r, change, sentAt, desc, err)
	case cur == r:
		// The role changed meanwhile; the new role may want a change too.
		m.maybeAlter(r, m.clock.Now())
	}
	r.mu.Unlock()
	if cur != nil && cur != r {
		// The replica was replaced meanwhile; the new one may want a
		// change too.
		cur.mu.Lock()
		m.maybeAlter(cur, m.clock.Now())
		cur.mu.Unlock()
	}
	return true
}

// answered makes the leader wait (broker.WaitAfterAlterPartition) for the
// metadata after an AlterPartition. The caller holds r.mu.
func (m *Manager) answered(r *replica, change broker.ISRChange, sentAt uint64, desc *keelpb.PartitionDescription, err error) {
	now := m.clock.Now()
	log := m.log.With("topic", r.topic, "partition", r.tp.Partition, "new_isr", change.ISR,
		"leader_epoch", change.LeaderEpoch, "partition_epoch", change.PartitionEpoch)
	r.alter = alterState{waiting: true, wait: broker.WaitAfterAlterPartition(log, change, sentAt, desc, err, now)}
	m.alterMu.Lock()
	m.waiting[r.tp] = struct{}{}
	m.alterMu.Unlock()
	m.maybeAlter(r, now)
}
