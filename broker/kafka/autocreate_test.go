package kafka

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

func clusterConfig(name, value string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
		ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: name, Value: &value}}}
}

func featureLevel(level uint32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{
		Name: fsm.MetadataVersionFeature, Level: level}}}
}

// metadataFor asks cl for topic's metadata with a Metadata request of
// version, allowing auto-creation or not (v4+).
func metadataFor(t *testing.T, cl *kgo.Client, version int16, allow bool, topic string) kmsg.MetadataResponseTopic {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version, req.AllowAutoTopicCreation = version, allow
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 {
		t.Fatalf("metadata of %s: %d topics", topic, len(resp.Topics))
	}
	return resp.Topics[0]
}

// TestMetadata_AutoCreatesTopics (KafkaApisTest's
// testTopicMetadataRequest cases with auto.create.topics.enable): a
// Metadata request for a topic that does not exist creates it through the
// controller with the client's principal and the cluster's num.partitions
// and default.replication.factor when the client allows it (always below
// v4) and the cluster's auto.create.topics.enable is on (its default from
// metadata.version 7); otherwise UNKNOWN_TOPIC_OR_PARTITION and nothing
// is asked.
func TestMetadata_AutoCreatesTopics(t *testing.T) {
	tests := []struct {
		name      string
		level     uint32
		configs   []*keelpb.Record
		version   int16
		allow     bool
		topic     string
		wantErr   *kerr.Error
		wantParts int
	}{
		{"on by default", fsm.AutoCreateMetadataVersion, nil, 12, true, "new", nil, 1},
		{"num.partitions", fsm.AutoCreateMetadataVersion, []*keelpb.Record{clusterConfig(fsm.NumPartitions, "3")}, 12, true, "new", nil, 3},
		{"v3 always allows", fsm.AutoCreateMetadataVersion, nil, 3, false, "new", nil, 1},
		{"the client does not allow", fsm.AutoCreateMetadataVersion, nil, 12, false, "new", kerr.UnknownTopicOrPartition, 0},
		{"turned off", fsm.AutoCreateMetadataVersion, []*keelpb.Record{clusterConfig(fsm.AutoCreateTopicsEnable, "false")}, 12, true, "new",
			kerr.UnknownTopicOrPartition, 0},
		{"below metadata.version 7", fsm.ThrottleMetadataVersion, nil, 12, true, "new", kerr.UnknownTopicOrPartition, 0},
		{"an internal topic", fsm.AutoCreateMetadataVersion, nil, 12, true, "__consumer_offsets", kerr.UnknownTopicOrPartition, 0},
		{"an invalid name", fsm.AutoCreateMetadataVersion, nil, 12, true, "no/slash", kerr.InvalidTopicException, 0},
		{"more replicas than brokers", fsm.AutoCreateMetadataVersion, []*keelpb.Record{clusterConfig(fsm.DefaultReplicationFactor, "3")}, 12, true, "new",
			kerr.InvalidReplicationFactor, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta := newFakeMeta(t)
			s := startServer(t, 1, meta, NewMemoryBackend(), nil)
			meta.must(append([]*keelpb.Record{featureLevel(tt.level)}, tt.configs...)...)
			var opts []kgo.Opt
			if tt.version < 4 {
				opts = append(opts, kgo.MaxVersions(kversion.V0_10_2())) // Metadata v2
			}
			cl := newClient(t, []string{s.Addr()}, opts...)
			mt := metadataFor(t, cl, tt.version, tt.allow, tt.topic)
			_, exists := meta.Image().Topic(tt.topic)
			if tt.wantErr != nil {
				if mt.ErrorCode != tt.wantErr.Code || exists {
					t.Fatalf("metadata: %v, topic created %v; want %v and none", kerr.ErrorForCode(mt.ErrorCode), exists, tt.wantErr)
				}
				return
			}
			if mt.ErrorCode != 0 || len(mt.Partitions) != tt.wantParts || !exists {
				t.Fatalf("metadata: %v, %d partitions, topic created %v; want %d partitions", kerr.ErrorForCode(mt.ErrorCode), len(mt.Partitions), exists, tt.wantParts)
			}
			if got := meta.forwardedPrincipals(); !slices.Equal(got, []string{"User:ANONYMOUS"}) {
				t.Fatalf("forwarded principals %v, want the client's", got)
			}
		})
	}
}

// TestMetadata_AutoCreateNeedsCreate: a client that may describe a topic
// but not create it (no CREATE on the cluster or the topic) gets
// TOPIC_AUTHORIZATION_FAILED and nothing is created (KafkaApis'
// unauthorizedForCreateTopics); with CREATE on the topic it is created.
func TestMetadata_AutoCreateNeedsCreate(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka auto-create test CA")
	if err != nil {
		t.Fatal(err)
	}
	brokerCert, err := ca.Config("broker-1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.TLS = brokerCert })
	meta.must(featureLevel(fsm.AutoCreateMetadataVersion))
	allow := func(id byte, op kmsg.ACLOperation) *keelpb.Record {
		return fsm.ACLRecord(fsm.ACLID{id}, acl.Binding{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders",
			PatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: "User:app", Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow})
	}
	meta.must(allow(1, kmsg.ACLOperationDescribe))
	app := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app")))

	if mt := metadataFor(t, app, 12, true, "orders"); mt.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("auto-create without CREATE: %v", kerr.ErrorForCode(mt.ErrorCode))
	}
	if _, ok := meta.Image().Topic("orders"); ok || len(meta.forwardedPrincipals()) != 0 {
		t.Fatalf("a refused auto-create created the topic, or asked the controller (%v)", meta.forwardedPrincipals())
	}
	meta.must(allow(2, kmsg.ACLOperationCreate))
	if mt := metadataFor(t, app, 12, true, "orders"); mt.ErrorCode != 0 || len(mt.Partitions) != 1 {
		t.Fatalf("auto-create with CREATE on the topic: %v, %d partitions", kerr.ErrorForCode(mt.ErrorCode), len(mt.Partitions))
	}
	if got := meta.forwardedPrincipals(); !slices.Equal(got, []string{"User:app"}) {
		t.Fatalf("forwarded principals %v, want User:app", got)
	}
}
