package group

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Load retries back off from loadBackoff up to loadBackoffMax.
const (
	loadBackoff    = 50 * time.Millisecond
	loadBackoffMax = 5 * time.Second
)

// load reads part's groups from the log and installs them, as Kafka's
// GroupMetadataManager.loadGroupsAndOffsets: the last record of each key
// wins and tombstones delete. A failed load is retried while the partition
// is still elected; NOT_LEADER leaves it unloaded (its Resign follows).
func (c *Coordinator) load(p int32, part *partition) {
	backoff := loadBackoff
	for {
		start := c.cfg.now()
		l := newLoader()
		err := c.cfg.Log.Load(part.ctx, p, l.apply)
		if err == nil {
			c.install(p, part, l)
			c.log.Info("group coordinator loaded a partition", "partition", p, "epoch", part.epoch,
				"groups", len(l.metas), "records", l.records, "took", c.cfg.now().Sub(start))
			return
		}
		if part.ctx.Err() != nil {
			return
		}
		if errors.Is(err, kerr.NotLeaderForPartition) {
			c.log.Info("group coordinator load: not the partition's leader", "partition", p, "epoch", part.epoch)
			return
		}
		c.log.Warn("group coordinator load failed; retrying", "partition", p, "epoch", part.epoch, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-part.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, loadBackoffMax)
	}
}

// loader is a load's state: every group's last metadata and offsets.
type loader struct {
	records int
	metas   map[string]*kmsg.GroupMetadataValue
	offsets map[string]map[topicPartition]offset
}

func newLoader() *loader {
	return &loader{metas: make(map[string]*kmsg.GroupMetadataValue), offsets: make(map[string]map[topicPartition]offset)}
}

func (l *loader) apply(_ int64, r Record) error {
	d, ok, err := decodeRecord(r)
	if err != nil || !ok {
		return err
	}
	l.records++
	switch {
	case d.isOffset && d.offset == nil:
		delete(l.offsets[d.group], d.tp)
	case d.isOffset:
		if l.offsets[d.group] == nil {
			l.offsets[d.group] = make(map[topicPartition]offset)
		}
		l.offsets[d.group][d.tp] = *d.offset
	case d.meta == nil:
		delete(l.metas, d.group)
	default:
		l.metas[d.group] = d.meta
	}
	return nil
}

// install makes the loaded groups part's, if part is still elected: a
// group with members is Stable in its generation, and each member's
// session starts afresh, as Kafka does on load.
func (c *Coordinator) install(p int32, part *partition, l *loader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts[p] != part {
		return
	}
	g := func(id string) *group {
		if part.groups[id] == nil {
			part.groups[id] = c.newGroup(id, p, part)
		}
		return part.groups[id]
	}
	for id, offsets := range l.offsets {
		if len(offsets) > 0 {
			g(id).offsets = offsets
		}
	}
	for id, v := range l.metas {
		g := g(id)
		g.mu.Lock()
		g.restore(v)
		g.mu.Unlock()
	}
	part.loaded = true
}

// restore sets g from its last GroupMetadata record.
func (g *group) restore(v *kmsg.GroupMetadataValue) {
	g.protocolType = v.ProtocolType
	g.generation = v.Generation
	g.protocol = ""
	if v.Protocol != nil {
		g.protocol = *v.Protocol
	}
	g.leader = ""
	if v.Leader != nil {
		g.leader = *v.Leader
	}
	if v.CurrentStateTimestamp >= 0 {
		g.stateTime = time.UnixMilli(v.CurrentStateTimestamp)
	}
	for _, vm := range v.Members {
		m := &member{
			id: vm.MemberID, instanceID: vm.InstanceID, clientID: vm.ClientID, host: vm.ClientHost,
			protocolType: v.ProtocolType,
			protocols:    []kmsg.JoinGroupRequestProtocol{{Name: g.protocol, Metadata: vm.Subscription}},
			session:      time.Duration(vm.SessionTimeoutMillis) * time.Millisecond,
			rebalance:    time.Duration(vm.RebalanceTimeoutMillis) * time.Millisecond,
			assignment:   vm.Assignment,
		}
		if vm.RebalanceTimeoutMillis < 0 {
			m.rebalance = m.session
		}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
	}
	if len(g.members) == 0 {
		g.state = stateEmpty
		return
	}
	g.state = stateStable
	for _, m := range g.members {
		g.armSession(m)
	}
}
