package server_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// entries renders configs as name=value(source) for the ones named.
func entries(cs []*keelpb.ConfigEntry, names ...string) string {
	var out []string
	for _, c := range cs {
		for _, n := range names {
			if c.GetName() == n {
				out = append(out, c.GetName()+"="+c.GetValue()+"("+c.GetSource().String()+")")
			}
		}
	}
	return strings.Join(out, " ")
}

// TestControllerService_Configs: IncrementalAlterConfigs through a node's
// gRPC service sets a topic's configs and the cluster defaults, a
// validate-only request answers the same and writes nothing, and topic
// describe and DescribeConfigs show each config's source.
func TestControllerService_Configs(t *testing.T) {
	_, active := startCluster(t, 1)
	cl := dialNode(t, active)
	ctx := testCtx(t)
	id := fsm.TopicID{0x1}
	if _, err := active.Controller().Propose(ctx,
		&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
			BrokerId: 1, IncarnationId: "00000000-0000-0000-0000-000000000001", Address: "127.0.0.1:9201", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion}}},
		&keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: id[:]}}},
		&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: id[:], Replicas: []int32{1}, Isr: []int32{1}, Leader: 1}}},
	); err != nil {
		t.Fatal(err)
	}
	topic := &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: "t"}
	cluster := &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}
	set := func(name, value string) *keelpb.AlterableConfig {
		return &keelpb.AlterableConfig{Name: name, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: value}
	}

	before := active.FSM().Image().Offset
	resp, err := cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: topic, ValidateOnly: true,
		Configs: []*keelpb.AlterableConfig{set(fsm.MinInsyncReplicas, "2")}})
	if err != nil || entries(resp.GetConfigs(), fsm.MinInsyncReplicas) != "min.insync.replicas=2(CONFIG_SOURCE_TOPIC)" {
		t.Fatalf("validate only: %v, %v", resp, err)
	}
	if after := active.FSM().Image().Offset; after != before {
		t.Fatalf("a validate-only request wrote: offset %d to %d", before, after)
	}

	if _, err := cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: topic,
		Configs: []*keelpb.AlterableConfig{set(fsm.MinInsyncReplicas, "2"), set(fsm.UncleanLeaderElection, "TRUE")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: cluster,
		Configs: []*keelpb.AlterableConfig{set(fsm.RetentionMs, "60000"), set(fsm.MinInsyncReplicas, "3")}}); err != nil {
		t.Fatal(err)
	}
	d, err := cl.DescribeTopic(ctx, &keelpb.DescribeTopicRequest{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := "min.insync.replicas=2(CONFIG_SOURCE_TOPIC) retention.ms=60000(CONFIG_SOURCE_CLUSTER_DEFAULT) " +
		"segment.bytes=1073741824(CONFIG_SOURCE_DEFAULT) unclean.leader.election.enable=true(CONFIG_SOURCE_TOPIC)"
	if got := entries(d.GetTopic().GetEffectiveConfigs(), fsm.MinInsyncReplicas, fsm.RetentionMs, fsm.SegmentBytes, fsm.UncleanLeaderElection); got != want {
		t.Fatalf("topic describe: %s\nwant %s", got, want)
	}
	if c := d.GetTopic().GetConfigs(); len(c) != 2 || c[fsm.UncleanLeaderElection] != "true" {
		t.Fatalf("the topic's own configs: %v", c)
	}
	dc, err := cl.DescribeConfigs(ctx, &keelpb.DescribeConfigsRequest{Resource: cluster, Linearizable: true})
	if err != nil || entries(dc.GetConfigs(), fsm.MinInsyncReplicas, fsm.RetentionMs) !=
		"min.insync.replicas=3(CONFIG_SOURCE_CLUSTER_DEFAULT) retention.ms=60000(CONFIG_SOURCE_CLUSTER_DEFAULT)" {
		t.Fatalf("cluster configs: %v, %v", dc, err)
	}

	_, err = cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: cluster,
		Configs: []*keelpb.AlterableConfig{set("max.compaction.lag.ms", "60000")}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "configs[0]: max.compaction.lag.ms: only the default") {
		t.Fatalf("max.compaction.lag.ms: %v", err)
	}
	_, err = cl.DescribeConfigs(ctx, &keelpb.DescribeConfigsRequest{Resource: &keelpb.ConfigResource{Type: topic.Type, Name: "nope"}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown topic: %v", err)
	}
	_, err = cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: &keelpb.ConfigResource{Type: topic.Type, Name: "nope"},
		Configs: []*keelpb.AlterableConfig{set(fsm.RetentionMs, "1")}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown topic: %v", err)
	}
}
