package broker

import (
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// What the external tests (package broker_test) use of this package's test
// helpers: they run the agent with the real data plane, broker/replication,
// which imports this package, so only an external test package can hold
// both.

type FakeCluster = fakeCluster

var (
	NewFakeCluster     = newFakeCluster
	NewFakeClusterWith = newFakeClusterWith
	StartAgent         = startAgent
	InSync             = inSync
	TLSConfigs         = tlsConfigs
	Inspect            = inspect
	DescribeReplicas   = describeReplicas
	TestLogger         = testLogger
	TopicRec           = topicRec
	PartitionRec       = partitionRec
	TopicT             = topicT
)

const WaitTimeout = waitTimeout

func (c *fakeCluster) Append(records ...*keelpb.Record) uint64 { return c.append(records...) }
func (c *fakeCluster) Image() *fsm.Image                       { return c.image() }
func (c *fakeCluster) AlterCalls() []*keelpb.AlterPartitionRequest {
	return c.alterCalls()
}
