package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataRecord is g's GroupMetadata record as it stands, with the given
// assignments (by member id; the members' own when nil).
func (g *group) metadataRecord(assignments map[string][]byte) Record {
	v := kmsg.NewGroupMetadataValue()
	v.Version = groupValueVersion
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	if g.protocol != "" {
		v.Protocol = &g.protocol
	}
	if g.leader != "" {
		v.Leader = &g.leader
	}
	v.CurrentStateTimestamp = g.stateTime.UnixMilli()
	for _, id := range g.memberIDs() {
		m := g.members[id]
		a := m.assignment
		if assignments != nil {
			a = assignments[id]
		}
		v.Members = append(v.Members, kmsg.GroupMetadataValueMember{
			MemberID:               m.id,
			InstanceID:             m.instanceID,
			ClientID:               m.clientID,
			ClientHost:             m.host,
			RebalanceTimeoutMillis: int32(m.rebalance.Milliseconds()),
			SessionTimeoutMillis:   int32(m.session.Milliseconds()),
			Subscription:           m.metadata(g.protocol),
			Assignment:             a,
		})
	}
	return Record{Key: groupKey(g.id), Value: v.AppendTo(nil)}
}

// storeEmpty writes, in the background, that g became Empty in its
// generation, as Kafka stores an emptied group, so that a new coordinator
// carries the generation on and does not wait for members that left. A
// LeaveGroup that emptied the group waits for it (g.emptied), nobody else:
// a failure is logged, and a write that the group has moved past by the
// time it holds the write lock is skipped, so that it never lands after a
// newer state.
func (g *group) storeEmpty() {
	gen := g.generation
	done := make(chan struct{})
	g.emptied = done
	if !g.c.background(func() {
		defer close(done)
		g.wmu.Lock()
		defer g.wmu.Unlock()
		g.mu.Lock()
		if g.state != stateEmpty || g.generation != gen {
			g.mu.Unlock()
			return
		}
		rec := g.metadataRecord(nil)
		g.mu.Unlock()
		g.appendRecords(context.Background(), []Record{rec}, false)
	}) {
		close(done)
	}
}

// background runs f in a goroutine that Close waits for; after Close, f
// does not run, and background says so.
func (c *Coordinator) background(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
	return true
}
