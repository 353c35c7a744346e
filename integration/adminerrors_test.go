package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafka_AdminRefusalsKeepTheirField: the active controller's refusal
// of a Kafka admin request, forwarded by a broker over gRPC, reaches the
// client as the Kafka error of the field it names (carried in a BadRequest
// detail, not read from the text) with the controller's message as it is,
// a colon in the reason included.
func TestKafka_AdminRefusalsKeepTheirField(t *testing.T) {
	t.Parallel()
	_, kafka := startKafkaCluster(t, []int32{1})
	cl := kafkaClient(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()

	create := kmsg.NewPtrCreateTopicsRequest()
	create.TimeoutMillis = 30000
	create.Topics = append(create.Topics,
		createTopicsTopic("too-many-replicas", 1, 3, nil),
		createTopicsTopic("bad-config", 1, 1, map[string]string{"retention.ms": "a week"}),
		createTopicsTopic("grown", 2, 1, nil))
	resp, err := create.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	type answer struct {
		code int16
		msg  string
	}
	got := map[string]answer{}
	for _, rt := range resp.Topics {
		got[rt.Topic] = answer{rt.ErrorCode, deref(rt.ErrorMessage)}
	}

	more := kmsg.NewPtrCreatePartitionsRequest()
	more.TimeoutMillis = 30000
	mt := kmsg.NewCreatePartitionsRequestTopic()
	mt.Topic, mt.Count = "grown", 1
	more.Topics = append(more.Topics, mt)
	mresp, err := more.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	for _, rt := range mresp.Topics {
		got["partitions of "+rt.Topic] = answer{rt.ErrorCode, deref(rt.ErrorMessage)}
	}

	for _, tt := range []struct {
		name      string
		want      *kerr.Error
		msgPrefix string
	}{
		{"too-many-replicas", kerr.InvalidReplicationFactor, "replication_factor: 3 exceeds the 1 registered brokers"},
		{"bad-config", kerr.InvalidConfig, "configs: retention.ms"},
		{"grown", nil, ""},
		{"partitions of grown", kerr.InvalidPartitions, `count: 1; topic "grown" already has 2 partitions`},
	} {
		a, ok := got[tt.name]
		switch {
		case !ok:
			t.Errorf("%s: no answer", tt.name)
		case kerr.ErrorForCode(a.code) != errOrNil(tt.want):
			t.Errorf("%s: %v (%q), want %v", tt.name, kerr.ErrorForCode(a.code), a.msg, tt.want)
		case !strings.HasPrefix(a.msg, tt.msgPrefix):
			t.Errorf("%s: message %q, want it to start %q", tt.name, a.msg, tt.msgPrefix)
		}
	}
}

// createTopicsTopic is one topic of a CreateTopics request.
func createTopicsTopic(name string, partitions int32, rf int16, configs map[string]string) kmsg.CreateTopicsRequestTopic {
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	return rt
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// errOrNil is e as kerr.ErrorForCode gives it: nil for no error.
func errOrNil(e *kerr.Error) error {
	if e == nil {
		return nil
	}
	return e
}
