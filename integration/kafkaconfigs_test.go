package integration

// Kafka's config APIs (DescribeConfigs, IncrementalAlterConfigs,
// AlterConfigs) on real brokers' Kafka listeners, through the clients
// operators' tools are built on: franz-go's kadm, Sarama's ClusterAdmin and
// confluent-kafka's AdminClient. The answers are checked, not just their
// success: values, sources and synonyms in Kafka's order, a change read
// back at once from the broker that took it and within a poll from every
// other, and a refusal per resource that changes nothing.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// configLine renders a kadm config as "value/SOURCE [synonym=value/SOURCE ...]".
func configLine(c kadm.Config) string {
	s := c.MaybeValue() + "/" + c.Source.String()
	for _, syn := range c.Synonyms {
		v := ""
		if syn.Value != nil {
			v = *syn.Value
		}
		s += " " + syn.Key + "=" + v + "/" + syn.Source.String()
	}
	return s
}

// configLines describes resource rc's configs named by want's keys.
func configLines(rc kadm.ResourceConfig, names ...string) map[string]string {
	out := map[string]string{}
	for _, c := range rc.Configs {
		for _, n := range names {
			if c.Key == n {
				out[n] = configLine(c)
			}
		}
	}
	return out
}

// checkConfigLines fails t for each of want's configs rc does not have so.
func checkConfigLines(t *testing.T, what string, rc kadm.ResourceConfig, want map[string]string) {
	t.Helper()
	if rc.Err != nil {
		t.Fatalf("%s: %v (%s)", what, rc.Err, rc.ErrMessage)
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	got := configLines(rc, names...)
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %s = %q; want %q", what, n, got[n], w)
		}
	}
}

func describeTopicOn(t *testing.T, adm *kadm.Client, topic string) kadm.ResourceConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs %s: %v", topic, err)
	}
	return rc
}

// TestKafkaConfigs_Kadm: kadm's DescribeTopicConfigs, DescribeBrokerConfigs
// and AlterTopicConfigs (incremental, validate-only and the legacy
// whole-set replace) and AlterBrokerConfigs on the cluster defaults,
// against three controllers and three brokers: each answer checked, each
// change read back at once from the broker that took it and soon from
// every broker, each refusal with Kafka's code and nothing of it applied.
func TestKafkaConfigs_Kadm(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "2", "--replication-factor", "3")
	adm := kafkaAdmin(t, kafka)
	cl := kafkaClient(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()

	poll.UntilState(t, kafkaTimeout, "every broker describes the new topic", func() (bool, string) {
		for id := range kafka {
			if rc := describeOnBroker(t, cl, id, topic); rc.ErrorCode != 0 {
				return false, fmt.Sprintf("broker %d: %v", id, kerr.ErrorForCode(rc.ErrorCode))
			}
		}
		return true, ""
	})
	checkConfigLines(t, "a new topic", describeTopicOn(t, adm, topic), map[string]string{
		"retention.ms":        "604800000/DEFAULT_CONFIG log.retention.ms=604800000/DEFAULT_CONFIG",
		"min.insync.replicas": "1/DEFAULT_CONFIG min.insync.replicas=1/DEFAULT_CONFIG",
	})

	// A change, straight to broker 1, is read back from broker 1 at once.
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	for _, kv := range [][2]string{{"retention.ms", "3600000"}, {"min.insync.replicas", "2"}} {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = kv[0], kmsg.StringPtr(kv[1])
		res.Configs = append(res.Configs, cfg)
	}
	alter.Resources = append(alter.Resources, res)
	resp, err := cl.Broker(1).Request(ctx, alter)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]; r.ErrorCode != 0 {
		t.Fatalf("IncrementalAlterConfigs on broker 1: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if got := describeOnBroker(t, cl, 1, topic); configValue(got, "retention.ms") != "3600000" {
		t.Fatalf("broker 1 right after its change: retention.ms = %q; want 3600000", configValue(got, "retention.ms"))
	}

	// The cluster defaults, under the brokers' names.
	if _, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "log.retention.bytes", Value: kmsg.StringPtr("1000000")}}); err != nil {
		t.Fatalf("AlterBrokerConfigs (the cluster defaults): %v", err)
	}
	want := map[string]string{
		"retention.ms":        "3600000/DYNAMIC_TOPIC_CONFIG retention.ms=3600000/DYNAMIC_TOPIC_CONFIG log.retention.ms=604800000/DEFAULT_CONFIG",
		"min.insync.replicas": "2/DYNAMIC_TOPIC_CONFIG min.insync.replicas=2/DYNAMIC_TOPIC_CONFIG min.insync.replicas=1/DEFAULT_CONFIG",
		"retention.bytes":     "1000000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.bytes=1000000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.bytes=-1/DEFAULT_CONFIG",
	}
	poll.UntilState(t, kafkaTimeout, "every broker describes the changes", func() (bool, string) {
		for id := range kafka {
			rc := describeOnBroker(t, cl, id, topic)
			for n, w := range want {
				if got := configValue(rc, n); got != strings.SplitN(w, "/", 2)[0] {
					return false, fmt.Sprintf("broker %d: %s = %q", id, n, got)
				}
			}
		}
		return true, ""
	})
	checkConfigLines(t, "after the changes", describeTopicOn(t, adm, topic), want)

	cluster, err := adm.DescribeBrokerConfigs(ctx)
	if err != nil {
		t.Fatalf("DescribeBrokerConfigs (the cluster defaults): %v", err)
	}
	if len(cluster) != 1 || len(cluster[0].Configs) != 1 || configLine(cluster[0].Configs[0]) != "1000000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.bytes=1000000/DYNAMIC_DEFAULT_BROKER_CONFIG" {
		t.Errorf("the cluster defaults: %+v; want log.retention.bytes=1000000 alone", cluster)
	}
	brokers, err := adm.DescribeBrokerConfigs(ctx, 2)
	if err != nil {
		t.Fatalf("DescribeBrokerConfigs 2: %v", err)
	}
	rc, _ := brokers.On("2", nil)
	checkConfigLines(t, "broker 2", rc, map[string]string{
		"node.id":             "2/STATIC_BROKER_CONFIG node.id=2/STATIC_BROKER_CONFIG",
		"log.retention.bytes": "1000000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.bytes=1000000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.bytes=-1/DEFAULT_CONFIG",
	})

	// Validate-only answers and changes nothing.
	vr, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1")}}, topic)
	if err != nil || vr[0].Err != nil {
		t.Fatalf("ValidateAlterTopicConfigs: %v %+v", err, vr)
	}
	// Refusals, one resource each, nothing of them applied: a bad value
	// beside a good one, an unknown config, an unknown topic.
	for _, tt := range []struct {
		name    string
		configs []kadm.AlterConfig
		topic   string
		want    *kerr.Error
	}{
		{"a bad value", []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("5")}, {Name: "min.insync.replicas", Value: kmsg.StringPtr("0")}}, topic, kerr.InvalidConfig},
		{"an unknown config", []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("5")}, {Name: "retention.hours", Value: kmsg.StringPtr("1")}}, topic, kerr.InvalidConfig},
		{"an unknown topic", []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("5")}}, "missing", kerr.UnknownTopicOrPartition},
	} {
		rs, err := adm.AlterTopicConfigs(ctx, tt.configs, tt.topic)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(rs) != 1 || !errors.Is(rs[0].Err, tt.want) || rs[0].ErrMessage == "" {
			t.Errorf("%s: %+v; want %v with a message", tt.name, rs, tt.want)
		}
	}
	// Bad input in one request, a refusal per resource: an unknown
	// resource type, a config named twice, an oversized value, an unknown
	// operation.
	bad := kmsg.NewPtrIncrementalAlterConfigsRequest()
	for _, r := range []struct {
		typ   kmsg.ConfigResourceType
		name  string
		op    kmsg.IncrementalAlterConfigOp
		names []string
		value string
	}{
		{kmsg.ConfigResourceType(9), "x", kmsg.IncrementalAlterConfigOpSet, []string{"retention.ms"}, "5"},
		{kmsg.ConfigResourceTypeTopic, topic, kmsg.IncrementalAlterConfigOpSet, []string{"retention.ms", "retention.ms"}, "5"},
		{kmsg.ConfigResourceTypeBroker, "", kmsg.IncrementalAlterConfigOpSet, []string{"log.retention.ms"}, strings.Repeat("9", 5000)},
		{kmsg.ConfigResourceTypeTopic, "other", kmsg.IncrementalAlterConfigOp(9), []string{"retention.ms"}, "5"},
	} {
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = r.typ, r.name
		for _, n := range r.names {
			cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			cfg.Name, cfg.Op, cfg.Value = n, r.op, kmsg.StringPtr(r.value)
			res.Configs = append(res.Configs, cfg)
		}
		bad.Resources = append(bad.Resources, res)
	}
	badResp, err := cl.Broker(2).Request(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*kerr.Error{kerr.InvalidRequest, kerr.InvalidRequest, kerr.InvalidConfig, kerr.InvalidRequest} {
		r := badResp.(*kmsg.IncrementalAlterConfigsResponse).Resources[i]
		if r.ErrorCode != want.Code || r.ErrorMessage == nil {
			t.Errorf("bad input %d (%v %q): %v; want %v with a message", i, r.ResourceType, r.ResourceName, kerr.ErrorForCode(r.ErrorCode), want)
		}
	}
	checkConfigLines(t, "after validate-only and refused changes", describeTopicOn(t, adm, topic), want)

	// The legacy AlterConfigs replaces the whole set: what it does not
	// name goes back to its default.
	if rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "segment.bytes", Value: kmsg.StringPtr("2000000")}}, topic); err != nil || rs[0].Err != nil {
		t.Fatalf("AlterTopicConfigsState: %v %+v", err, rs)
	}
	checkConfigLines(t, "after the legacy AlterConfigs", describeOnAllEventually(t, adm, cl, kafka, topic, "retention.ms", "604800000"), map[string]string{
		"segment.bytes":       "2000000/DYNAMIC_TOPIC_CONFIG segment.bytes=2000000/DYNAMIC_TOPIC_CONFIG log.segment.bytes=1073741824/DEFAULT_CONFIG",
		"retention.ms":        "604800000/DEFAULT_CONFIG log.retention.ms=604800000/DEFAULT_CONFIG",
		"min.insync.replicas": "1/DEFAULT_CONFIG min.insync.replicas=1/DEFAULT_CONFIG",
	})
}

// describeOnBroker asks broker id alone for topic's configs.
func describeOnBroker(t *testing.T, cl *kgo.Client, id int32, topic string) kmsg.DescribeConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	req.Resources = append(req.Resources, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatalf("DescribeConfigs on broker %d: %v", id, err)
	}
	return resp.(*kmsg.DescribeConfigsResponse).Resources[0]
}

func configValue(r kmsg.DescribeConfigsResponseResource, name string) string {
	for _, c := range r.Configs {
		if c.Name == name && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// describeOnAllEventually waits until every broker has config name at
// value for topic, and returns kadm's description then.
func describeOnAllEventually(t *testing.T, adm *kadm.Client, cl *kgo.Client, kafka map[int32]string, topic, name, value string) kadm.ResourceConfig {
	t.Helper()
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("every broker has %s=%s", name, value), func() (bool, string) {
		for id := range kafka {
			if got := configValue(describeOnBroker(t, cl, id, topic), name); got != value {
				return false, fmt.Sprintf("broker %d: %q", id, got)
			}
		}
		return true, ""
	})
	return describeTopicOn(t, adm, topic)
}

// TestKafkaConfigs_Sarama: Sarama's ClusterAdmin, which lists topics with
// DescribeConfigs (it failed outright while the brokers refused it), and
// describes and alters a topic's configs.
func TestKafkaConfigs_Sarama(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "sarama"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Admin.Timeout = 30 * time.Second
	adm, err := sarama.NewClusterAdmin(bootstrap(kafka), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	retain := "3600000"
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &retain}}, false); err != nil {
		t.Fatalf("IncrementalAlterConfig: %v", err)
	}
	var details map[string]sarama.TopicDetail
	poll.UntilState(t, kafkaTimeout, "Sarama lists the topic with its retention.ms", func() (bool, string) {
		details, err = adm.ListTopics()
		if err != nil {
			return false, err.Error()
		}
		d, ok := details[topic]
		if !ok {
			return false, fmt.Sprintf("not listed: %v", details)
		}
		if v := d.ConfigEntries["retention.ms"]; v == nil || *v != retain {
			return false, fmt.Sprintf("retention.ms %v", d.ConfigEntries["retention.ms"])
		}
		return true, ""
	})
	if d := details[topic]; d.NumPartitions != 1 || d.ReplicationFactor != 3 {
		t.Errorf("ListTopics: %+v; want 1 partition of 3 replicas", d)
	}
	results, err := adm.DescribeConfigs([]*sarama.ConfigResource{
		{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms", "max.message.bytes"}},
		{Type: sarama.TopicResource, Name: "missing"},
	}, sarama.DescribeConfigsOptions{IncludeSynonyms: true})
	if err != nil {
		t.Fatalf("DescribeConfigs: %v", err)
	}
	got := map[string]string{}
	for _, r := range results {
		if r.Name == "missing" {
			if r.ErrorCode != sarama.ErrUnknownTopicOrPartition {
				t.Errorf("DescribeConfigs of a missing topic: %v; want UNKNOWN_TOPIC_OR_PARTITION", r.ErrorCode)
			}
			continue
		}
		for _, e := range r.Configs {
			line := e.Value + "/" + e.Source.String()
			for _, syn := range e.Synonyms {
				line += " " + syn.ConfigName + "=" + syn.ConfigValue + "/" + syn.Source.String()
			}
			got[e.Name] = line
		}
	}
	want := map[string]string{
		"retention.ms":      fmt.Sprintf("3600000/%v retention.ms=3600000/%v log.retention.ms=604800000/%v", sarama.SourceTopic, sarama.SourceTopic, sarama.SourceDefault),
		"max.message.bytes": fmt.Sprintf("1048588/%v message.max.bytes=1048588/%v", sarama.SourceDefault, sarama.SourceDefault),
	}
	if len(got) != len(want) || got["retention.ms"] != want["retention.ms"] || got["max.message.bytes"] != want["max.message.bytes"] {
		t.Errorf("DescribeConfigs: %v; want %v", got, want)
	}
}

// TestPythonClient_Configs: confluent-kafka's AdminClient (Debian's
// python3-confluent-kafka, librdkafka 2.0) describes a topic's configs
// with their sources and alters them with AlterConfigs (the legacy
// whole-set replace this client version has).
func TestPythonClient_Configs(t *testing.T) {
	t.Parallel()
	python := pythonWithConfluentKafka(t)
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "python-configs"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3")
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/configs.py", strings.Join(bootstrap(kafka), ","), topic).CombinedOutput()
	if err != nil {
		t.Fatalf("testdata/configs.py: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{
		"before retention.ms=604800000 source=DEFAULT_CONFIG",
		"altered",
		"after retention.ms=3600000 source=DYNAMIC_TOPIC_CONFIG",
		"after min.insync.replicas=2 source=DYNAMIC_TOPIC_CONFIG",
		"refused min.insync.replicas=0: INVALID_CONFIG",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("testdata/configs.py said:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}
