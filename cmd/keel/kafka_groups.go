package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/broker/kafka"
)

// groupFlags are the group coordinator's flags on keel broker: Kafka's
// group.* and offsets.topic.* broker configs.
type groupFlags struct {
	initialRebalanceDelay, minSession, maxSession time.Duration
	partitions                                    int32
	replicationFactor                             int16
}

func newGroupFlags() groupFlags {
	return groupFlags{
		initialRebalanceDelay: 3 * time.Second,
		minSession:            6 * time.Second,
		maxSession:            30 * time.Minute,
		partitions:            kafka.DefaultOffsetsTopicPartitions,
		replicationFactor:     kafka.DefaultOffsetsTopicReplicationFactor,
	}
}

func (g *groupFlags) addFlags(f *pflag.FlagSet) {
	f.DurationVar(&g.initialRebalanceDelay, "group-initial-rebalance-delay", g.initialRebalanceDelay,
		"how long a new group's first rebalance waits for more members (Kafka's group.initial.rebalance.delay.ms)")
	f.DurationVar(&g.minSession, "group-min-session-timeout", g.minSession,
		"the shortest session timeout a group member may ask for (Kafka's group.min.session.timeout.ms)")
	f.DurationVar(&g.maxSession, "group-max-session-timeout", g.maxSession,
		"the longest session timeout a group member may ask for (Kafka's group.max.session.timeout.ms)")
	f.Int32Var(&g.partitions, "offsets-topic-partitions", g.partitions,
		"partitions of __consumer_offsets, when a broker first creates it (Kafka's offsets.topic.num.partitions)")
	f.Int16Var(&g.replicationFactor, "offsets-topic-replication-factor", g.replicationFactor,
		"replication factor of __consumer_offsets; groups wait until this many brokers are live (Kafka's offsets.topic.replication.factor)")
}

func (g groupFlags) check() error {
	switch {
	case g.initialRebalanceDelay < 0:
		return fmt.Errorf("--group-initial-rebalance-delay %s: want 0 or more", g.initialRebalanceDelay)
	case g.minSession <= 0 || g.maxSession < g.minSession:
		return fmt.Errorf("--group-min-session-timeout %s, --group-max-session-timeout %s: want 0 < min <= max", g.minSession, g.maxSession)
	case g.partitions < 1:
		return fmt.Errorf("--offsets-topic-partitions %d: want 1 or more", g.partitions)
	case g.replicationFactor < 1:
		return fmt.Errorf("--offsets-topic-replication-factor %d: want 1 or more", g.replicationFactor)
	}
	return nil
}

// apply sets the listener's offsets topic and returns the coordinator's
// config.
func (g groupFlags) apply(c *kafka.Config) *group.Config {
	c.OffsetsTopicPartitions, c.OffsetsTopicReplicationFactor = g.partitions, g.replicationFactor
	delay := g.initialRebalanceDelay
	if delay == 0 {
		delay = -1 // group.Config: none (its zero is Kafka's default)
	}
	return &group.Config{InitialRebalanceDelay: delay, MinSessionTimeout: g.minSession, MaxSessionTimeout: g.maxSession}
}
