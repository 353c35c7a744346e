package kafka

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

func describeConfigs(t *testing.T, cl *kgo.Client, synonyms bool, resources ...kmsg.DescribeConfigsRequestResource) []kmsg.DescribeConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Resources, req.IncludeSynonyms, req.IncludeDocumentation = resources, synonyms, true
	// Straight to broker 1: a client routes a BROKER resource with an id
	// to that broker, and these ask broker 1 about others.
	kresp, err := cl.Broker(1).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp := kresp.(*kmsg.DescribeConfigsResponse)
	if len(resp.Resources) != len(resources) {
		t.Fatalf("%d resources answered, %d asked", len(resp.Resources), len(resources))
	}
	return resp.Resources
}

func configResource(typ kmsg.ConfigResourceType, name string, configs ...string) kmsg.DescribeConfigsRequestResource {
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.ConfigNames = typ, name, configs
	return r
}

// synonymsOf renders a config's synonyms as "name=value/source".
func synonymsOf(c kmsg.DescribeConfigsResponseResourceConfig) string {
	var out []string
	for _, s := range c.ConfigSynonyms {
		out = append(out, s.Name+"="+*s.Value+"/"+s.Source.String())
	}
	return strings.Join(out, " ")
}

// TestServer_DescribeConfigs: a topic's configs from the broker's image,
// each with its source and its synonyms in Kafka's order (the topic's
// value, the cluster default under its broker name, the built-in
// default); the cluster defaults as the BROKER resource with no name; this
// broker's configs by its id; a refusal per resource for the rest.
func TestServer_DescribeConfigs(t *testing.T) {
	meta := newFakeMeta(t)
	meta.createTopic("orders", []int32{1})
	v := "3"
	meta.must(
		&keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC,
			ResourceName: "orders", Name: fsm.RetentionMs, Value: &v}}},
		&keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER,
			Name: fsm.MinInsyncReplicas, Value: &v}}},
	)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})

	got := describeConfigs(t, cl, true, configResource(kmsg.ConfigResourceTypeTopic, "orders"))[0]
	// Every topic config, not the broker ones (the replication throttles).
	topicConfigs := len(slices.DeleteFunc(fsm.ConfigDefs(), func(d fsm.ConfigDef) bool { return d.Broker }))
	if got.ErrorCode != 0 || len(got.Configs) != topicConfigs {
		t.Fatalf("topic: %v, %d configs", kerr.ErrorForCode(got.ErrorCode), len(got.Configs))
	}
	want := map[string]struct {
		value    string
		source   kmsg.ConfigSource
		synonyms string
	}{
		fsm.RetentionMs: {"3", kmsg.ConfigSourceDynamicTopicConfig,
			"retention.ms=3/DYNAMIC_TOPIC_CONFIG log.retention.ms=604800000/DEFAULT_CONFIG"},
		fsm.MinInsyncReplicas: {"3", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
			"min.insync.replicas=3/DYNAMIC_DEFAULT_BROKER_CONFIG min.insync.replicas=1/DEFAULT_CONFIG"},
		fsm.MaxMessageBytes: {"1048588", kmsg.ConfigSourceDefaultConfig, "message.max.bytes=1048588/DEFAULT_CONFIG"},
	}
	for _, c := range got.Configs {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		if *c.Value != w.value || c.Source != w.source || synonymsOf(c) != w.synonyms || c.ReadOnly || c.Documentation == nil {
			t.Errorf("%s = %s (%v), synonyms %q; want %s (%v), %q", c.Name, *c.Value, c.Source, synonymsOf(c), w.value, w.source, w.synonyms)
		}
		delete(want, c.Name)
	}
	if len(want) > 0 {
		t.Errorf("configs not answered: %v", want)
	}

	rs := describeConfigs(t, cl, false,
		configResource(kmsg.ConfigResourceTypeTopic, "orders", fsm.RetentionMs, "no.such.config"),
		configResource(kmsg.ConfigResourceTypeBroker, ""),
		configResource(kmsg.ConfigResourceTypeBroker, "1", "node.id", "log.retention.ms"),
		configResource(kmsg.ConfigResourceTypeTopic, "missing"),
		configResource(kmsg.ConfigResourceTypeTopic, "bad/name"),
		configResource(kmsg.ConfigResourceTypeBroker, "2"),
		configResource(kmsg.ConfigResourceTypeBroker, "one"),
		configResource(kmsg.ConfigResourceTypeBrokerLogger, "1"),
		configResource(kmsg.ConfigResourceType(9), "x"),
	)
	if c := rs[0].Configs; len(c) != 1 || c[0].Name != fsm.RetentionMs || len(c[0].ConfigSynonyms) != 0 {
		t.Errorf("named configs: %+v", c)
	}
	if c := rs[1].Configs; rs[1].ErrorCode != 0 || len(c) != 1 || c[0].Name != "min.insync.replicas" || *c[0].Value != "3" ||
		c[0].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Errorf("cluster defaults: %v %+v", kerr.ErrorForCode(rs[1].ErrorCode), c)
	}
	if c := rs[2].Configs; rs[2].ErrorCode != 0 || len(c) != 2 || c[0].Name != "log.retention.ms" || c[0].Source != kmsg.ConfigSourceDefaultConfig ||
		c[1].Name != "node.id" || *c[1].Value != "1" || !c[1].ReadOnly || c[1].Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Errorf("this broker: %v %+v", kerr.ErrorForCode(rs[2].ErrorCode), c)
	}
	for i, want := range []*kerr.Error{kerr.UnknownTopicOrPartition, kerr.InvalidTopicException, kerr.InvalidRequest, kerr.InvalidRequest, kerr.InvalidRequest, kerr.InvalidRequest} {
		r := rs[3+i]
		if r.ErrorCode != want.Code || len(r.Configs) != 0 {
			t.Errorf("%v %q: %v, %d configs; want %v", r.ResourceType, r.ResourceName, kerr.ErrorForCode(r.ErrorCode), len(r.Configs), want)
		}
	}
}

func incremental(typ kmsg.ConfigResourceType, name string, configs ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsRequestResource {
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.Configs = typ, name, configs
	return r
}

func op(o kmsg.IncrementalAlterConfigOp, name string, value *string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Op, c.Name, c.Value = o, name, value
	return c
}

func incrementalAlter(t *testing.T, cl *kgo.Client, validateOnly bool, resources ...kmsg.IncrementalAlterConfigsRequestResource) []kmsg.IncrementalAlterConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources, req.ValidateOnly = resources, validateOnly
	kresp, err := cl.Broker(1).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp := kresp.(*kmsg.IncrementalAlterConfigsResponse)
	if len(resp.Resources) != len(resources) {
		t.Fatalf("%d resources answered, %d asked", len(resp.Resources), len(resources))
	}
	return resp.Resources
}

// TestServer_IncrementalAlterConfigs: changes forwarded, with the client's
// principal, and seen in the broker's image when answered; validate-only
// changes nothing; the cluster defaults by their broker names; a refusal
// per resource, with Kafka's code, for what is wrong with it, and nothing
// of it applied.
func TestServer_IncrementalAlterConfigs(t *testing.T) {
	meta := newFakeMeta(t)
	meta.createTopic("orders", []int32{1})
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	set, del := kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete

	rs := incrementalAlter(t, cl, true, incremental(kmsg.ConfigResourceTypeTopic, "orders", op(set, fsm.RetentionMs, kmsg.StringPtr("5"))))
	if rs[0].ErrorCode != 0 {
		t.Fatalf("validate only: %v", kerr.ErrorForCode(rs[0].ErrorCode))
	}
	if tp, _ := meta.Image().Topic("orders"); len(tp.Configs) != 0 {
		t.Fatalf("validate only changed the topic: %v", tp.Configs)
	}

	rs = incrementalAlter(t, cl, false,
		incremental(kmsg.ConfigResourceTypeTopic, "orders", op(set, fsm.RetentionMs, kmsg.StringPtr("5")), op(del, fsm.SegmentBytes, nil)),
		incremental(kmsg.ConfigResourceTypeBroker, "", op(set, "log.retention.bytes", kmsg.StringPtr("1000"))),
	)
	for _, r := range rs {
		if r.ErrorCode != 0 {
			t.Fatalf("%v %q: %v %v", r.ResourceType, r.ResourceName, kerr.ErrorForCode(r.ErrorCode), *r.ErrorMessage)
		}
	}
	// Answered once seen here: a describe next reads it.
	got := describeConfigs(t, cl, false, configResource(kmsg.ConfigResourceTypeTopic, "orders", fsm.RetentionMs, fsm.RetentionBytes))[0]
	if len(got.Configs) != 2 || *got.Configs[0].Value != "1000" || got.Configs[0].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig ||
		*got.Configs[1].Value != "5" || got.Configs[1].Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("after the change: %+v", got.Configs)
	}

	big := strings.Repeat("9", 5000)
	for _, tt := range []struct {
		name string
		res  []kmsg.IncrementalAlterConfigsRequestResource
		want *kerr.Error
	}{
		{"an unknown config beside a good one", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeTopic, "orders",
			op(set, fsm.RetentionMs, kmsg.StringPtr("7")), op(set, "retention.hours", kmsg.StringPtr("1")))}, kerr.InvalidConfig},
		{"a bad value beside a good one", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeTopic, "orders",
			op(set, fsm.RetentionMs, kmsg.StringPtr("7")), op(set, fsm.MinInsyncReplicas, kmsg.StringPtr("0")))}, kerr.InvalidConfig},
		{"a config named twice", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeTopic, "orders",
			op(set, fsm.RetentionMs, kmsg.StringPtr("8")), op(del, fsm.RetentionMs, nil))}, kerr.InvalidRequest},
		{"a resource named twice", []kmsg.IncrementalAlterConfigsRequestResource{
			incremental(kmsg.ConfigResourceTypeTopic, "orders", op(set, fsm.RetentionMs, kmsg.StringPtr("7"))),
			incremental(kmsg.ConfigResourceTypeTopic, "orders", op(set, fsm.SegmentBytes, kmsg.StringPtr("2000000")))}, kerr.InvalidRequest},
		{"an unknown topic", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeTopic, "missing",
			op(set, fsm.RetentionMs, kmsg.StringPtr("7")))}, kerr.UnknownTopicOrPartition},
		{"a topic config's name on the cluster defaults", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "",
			op(set, fsm.RetentionMs, kmsg.StringPtr("7")))}, kerr.InvalidConfig},
		{"this broker's own configs", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "1",
			op(set, "log.retention.ms", kmsg.StringPtr("7")))}, kerr.InvalidRequest},
		{"another broker", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "2",
			op(set, "log.retention.ms", kmsg.StringPtr("7")))}, kerr.InvalidRequest},
		{"BROKER_LOGGER", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBrokerLogger, "1",
			op(set, "root", kmsg.StringPtr("DEBUG")))}, kerr.InvalidRequest},
		{"an unknown resource type", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceType(9), "x",
			op(set, "a", kmsg.StringPtr("b")))}, kerr.InvalidRequest},
		{"an unknown operation", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "",
			op(kmsg.IncrementalAlterConfigOp(7), "log.retention.ms", kmsg.StringPtr("7")))}, kerr.InvalidRequest},
		{"an oversized value", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "",
			op(set, "log.retention.ms", kmsg.StringPtr(big)))}, kerr.InvalidConfig},
		{"a null value to set", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "",
			op(set, "log.retention.ms", nil))}, kerr.InvalidRequest},
		{"append to a number", []kmsg.IncrementalAlterConfigsRequestResource{incremental(kmsg.ConfigResourceTypeBroker, "",
			op(kmsg.IncrementalAlterConfigOpAppend, "log.retention.ms", kmsg.StringPtr("1")))}, kerr.InvalidRequest},
	} {
		for i, r := range incrementalAlter(t, cl, false, tt.res...) {
			if r.ErrorCode != tt.want.Code || r.ErrorMessage == nil || *r.ErrorMessage == "" {
				t.Errorf("%s, resource %d: %v; want %v with a message", tt.name, i, kerr.ErrorForCode(r.ErrorCode), tt.want)
			}
		}
	}
	if tp, _ := meta.Image().Topic("orders"); tp.Configs[fsm.RetentionMs] != "5" {
		t.Fatalf("a refused change applied: %v", tp.Configs)
	}
	if c := meta.Image().ClusterConfigs(); len(c) != 1 {
		t.Fatalf("a refused change applied to the cluster defaults: %v", c)
	}
	for _, p := range meta.forwardedPrincipals() {
		if p != "User:ANONYMOUS" {
			t.Fatalf("principals forwarded: %q", meta.forwardedPrincipals())
		}
	}
}

// TestServer_AlterConfigs: the legacy API replaces the resource's whole
// set: configs not named go back to their defaults.
func TestServer_AlterConfigs(t *testing.T) {
	meta := newFakeMeta(t)
	meta.createTopic("orders", []int32{1})
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	if rs := incrementalAlter(t, cl, false, incremental(kmsg.ConfigResourceTypeTopic, "orders",
		op(kmsg.IncrementalAlterConfigOpSet, fsm.RetentionMs, kmsg.StringPtr("5")),
		op(kmsg.IncrementalAlterConfigOpSet, fsm.SegmentBytes, kmsg.StringPtr("2000000")))); rs[0].ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(rs[0].ErrorCode))
	}
	req := kmsg.NewPtrAlterConfigsRequest()
	r := kmsg.NewAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "orders"
	c := kmsg.NewAlterConfigsRequestResourceConfig()
	c.Name, c.Value = fsm.MinInsyncReplicas, kmsg.StringPtr("2")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(resp.Resources[0].ErrorCode))
	}
	tp, _ := meta.Image().Topic("orders")
	if len(tp.Configs) != 1 || tp.Configs[fsm.MinInsyncReplicas] != "2" {
		t.Fatalf("topic configs after a legacy alter: %v; want only min.insync.replicas=2", tp.Configs)
	}
}

// TestServer_ConfigsAuthorized: over TLS each config request asks
// allowed() per resource: a client that may not (a broker's certificate,
// not an admin's) gets TOPIC_AUTHORIZATION_FAILED for a topic and
// CLUSTER_AUTHORIZATION_FAILED for a broker, and nothing is forwarded; an
// admin's change is forwarded with its principal.
func TestServer_ConfigsAuthorized(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"broker-1", "broker-2", "admin"} {
		if certs[cn], err = ca.Config(cn, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.TLS = certs["broker-1"] })
	meta.createTopic("secure", []int32{1})
	client := func(cn string) *kgo.Client {
		return newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(certs[cn].Client(tlsauth.RoleBroker)))
	}
	retention := op(kmsg.IncrementalAlterConfigOpSet, fsm.RetentionMs, kmsg.StringPtr("5"))
	other := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app-orders")))
	rs := incrementalAlter(t, other, false, incremental(kmsg.ConfigResourceTypeTopic, "secure", retention),
		incremental(kmsg.ConfigResourceTypeBroker, "", op(kmsg.IncrementalAlterConfigOpSet, "log.retention.ms", kmsg.StringPtr("5"))))
	if rs[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || rs[1].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alter without the right: %v, %v", kerr.ErrorForCode(rs[0].ErrorCode), kerr.ErrorForCode(rs[1].ErrorCode))
	}
	ds := describeConfigs(t, other, false, configResource(kmsg.ConfigResourceTypeTopic, "secure"), configResource(kmsg.ConfigResourceTypeBroker, "1"))
	if ds[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || ds[1].ErrorCode != kerr.ClusterAuthorizationFailed.Code || len(ds[0].Configs)+len(ds[1].Configs) != 0 {
		t.Fatalf("describe without the right: %v, %v", kerr.ErrorForCode(ds[0].ErrorCode), kerr.ErrorForCode(ds[1].ErrorCode))
	}
	if got := meta.forwardedPrincipals(); len(got) != 0 {
		t.Fatalf("forwarded without the right: %q", got)
	}
	if rs := incrementalAlter(t, client("admin"), false, incremental(kmsg.ConfigResourceTypeTopic, "secure", retention)); rs[0].ErrorCode != 0 {
		t.Fatalf("an admin's change: %v", kerr.ErrorForCode(rs[0].ErrorCode))
	}
	if got := meta.forwardedPrincipals(); len(got) != 1 || got[0] != "User:admin" {
		t.Fatalf("principals forwarded: %q; want [User:admin]", got)
	}
}
