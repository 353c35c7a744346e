package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

func (f *fakeAdmin) IncrementalAlterConfigs(_ context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("IncrementalAlterConfigs", req); err != nil {
		return nil, err
	}
	return &keelpb.IncrementalAlterConfigsResponse{Configs: f.topic.GetEffectiveConfigs(), Elections: f.results}, nil
}

func (f *fakeAdmin) DescribeConfigs(_ context.Context, req *keelpb.DescribeConfigsRequest) (*keelpb.DescribeConfigsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DescribeConfigs", req); err != nil {
		return nil, err
	}
	return &keelpb.DescribeConfigsResponse{Configs: f.topic.GetEffectiveConfigs()}, nil
}

func topicResource(name string) *keelpb.ConfigResource {
	return &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: name}
}

func set(name, value string) *keelpb.AlterableConfig {
	return &keelpb.AlterableConfig{Name: name, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: value}
}

func del(name string) *keelpb.AlterableConfig {
	return &keelpb.AlterableConfig{Name: name, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE}
}

// The request each command line makes: sets in name order, in the form the
// controllers store, then deletes in the order given.
func TestTopicAlter_Request(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want *keelpb.IncrementalAlterConfigsRequest
	}{
		{"set", []string{"topic", "alter", "orders", "--config", "min.insync.replicas=2"},
			&keelpb.IncrementalAlterConfigsRequest{Resource: topicResource("orders"), Configs: []*keelpb.AlterableConfig{set("min.insync.replicas", "2")}}},
		{"sets in name order, deletes after", []string{"topic", "alter", "orders", "--config", "retention.ms=1000",
			"--delete-config", "segment.bytes", "--config", "min.insync.replicas=2", "--delete-config", "cleanup.policy"},
			&keelpb.IncrementalAlterConfigsRequest{Resource: topicResource("orders"), Configs: []*keelpb.AlterableConfig{
				set("min.insync.replicas", "2"), set("retention.ms", "1000"), del("segment.bytes"), del("cleanup.policy")}}},
		{"booleans in any case", []string{"topic", "alter", "orders", "--config", "unclean.leader.election.enable=TRUE", "--validate-only"},
			&keelpb.IncrementalAlterConfigsRequest{Resource: topicResource("orders"), ValidateOnly: true,
				Configs: []*keelpb.AlterableConfig{set("unclean.leader.election.enable", "TRUE")}}},
		{"cluster defaults", []string{"config", "alter", "--delete-config", "min.insync.replicas"},
			&keelpb.IncrementalAlterConfigsRequest{Resource: clusterResource, Configs: []*keelpb.AlterableConfig{del("min.insync.replicas")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeAdmin{topic: sampleTopic()}
			addr := serveAdmin(t, fake)
			if out, err := runKeel(t, append(tc.args, "--controllers", addr)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if _, req := fake.got(); !proto.Equal(req, tc.want) {
				t.Fatalf("request %v\nwant %v", req, tc.want)
			}
		})
	}
}

// A bad command line fails before any RPC, with one line naming what is wrong.
func TestTopicAlter_BadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing to change", []string{"topic", "alter", "orders"}, "nothing to change: give --config key=value or --delete-config key"},
		{"unknown config", []string{"topic", "alter", "orders", "--config", "min.isr=2"}, `--config: unknown config "min.isr"`},
		{"not a number", []string{"topic", "alter", "orders", "--config", "min.insync.replicas=two"}, `--config: min.insync.replicas: "two" is not a whole number`},
		{"out of range", []string{"topic", "alter", "orders", "--config", "min.insync.replicas=0"}, "--config: min.insync.replicas: 0 is outside"},
		{"not a boolean", []string{"config", "alter", "--config", "unclean.leader.election.enable=yes"}, `--config: unclean.leader.election.enable: "yes" is not a boolean`},
		{"no value", []string{"topic", "alter", "orders", "--config", "retention.ms"}, `--config: "retention.ms": want key=value`},
		{"set twice", []string{"topic", "alter", "orders", "--config", "retention.ms=1", "--config", "retention.ms=2"}, "--config: retention.ms given twice"},
		{"deleted twice", []string{"topic", "alter", "orders", "--delete-config", "retention.ms", "--delete-config", "retention.ms"}, "--delete-config: retention.ms given twice"},
		{"set and deleted", []string{"topic", "alter", "orders", "--config", "retention.ms=1", "--delete-config", "retention.ms"}, "retention.ms is both set (--config) and deleted (--delete-config)"},
		{"unknown delete", []string{"config", "alter", "--delete-config", "log.retention.ms"}, `--delete-config: unknown config "log.retention.ms"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeAdmin{topic: sampleTopic()}
			addr := serveAdmin(t, fake)
			_, err := runKeel(t, append(tc.args, "--controllers", addr)...)
			if err == nil || !strings.Contains(errorLine(err), tc.want) {
				t.Fatalf("error %v, want one holding %q", err, tc.want)
			}
			if calls, _ := fake.got(); len(calls) != 0 {
				t.Fatalf("a bad command line made calls %v", calls)
			}
		})
	}
}

func TestTopicAlter_Output(t *testing.T) {
	fake := &fakeAdmin{topic: sampleTopic(), results: []*keelpb.ElectionResult{{Topic: "orders", Partition: 1, Leader: 3}}}
	addr := serveAdmin(t, fake)

	out, err := runKeel(t, "topic", "alter", "orders", "--controllers", addr, "--config", "unclean.leader.election.enable=true", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want := "map[configs:[map[name:min.insync.replicas source:cluster_default value:2] map[name:retention.ms source:default value:604800000] " +
		"map[name:unclean.leader.election.enable source:topic value:true]] elections:[map[error: leader:3 partition:1 topic:orders]] topic:orders validate_only:false]"
	if got := decodeJSON(t, out); got != want {
		t.Fatalf("topic alter -o json = %s\nwant %s", got, want)
	}

	out, err = runKeel(t, "topic", "alter", "orders", "--controllers", addr, "--config", "unclean.leader.election.enable=true", "--validate-only")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"validated, nothing written", "CONFIG", "min.insync.replicas", "cluster_default",
		"elected leader 3 of orders/1 (unclean election: the partition is recovering)"} {
		if !strings.Contains(out, line) {
			t.Fatalf("topic alter lacks %q:\n%s", line, out)
		}
	}

	// The controller's refusal is one line with its code.
	fake.set(func(f *fakeAdmin) { f.err = status.Error(codes.NotFound, `topic "orders" not found`) })
	_, err = runKeel(t, "topic", "alter", "orders", "--controllers", addr, "--config", "retention.ms=1")
	if got := errorLine(err); got != `NotFound: topic "orders" not found` {
		t.Fatalf("alter of an unknown topic: %q", got)
	}
}

func TestConfigDescribe(t *testing.T) {
	fake := &fakeAdmin{topic: sampleTopic()}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "config", "describe", "--controllers", addr, "--linearizable")
	if err != nil {
		t.Fatal(err)
	}
	if _, req := fake.got(); !proto.Equal(req, &keelpb.DescribeConfigsRequest{Resource: clusterResource, Linearizable: true}) {
		t.Fatalf("request %v", req)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "CONFIG VALUE SOURCE" ||
		strings.Join(strings.Fields(lines[1]), " ") != "min.insync.replicas 2 cluster_default" {
		t.Fatalf("config describe:\n%s", out)
	}
	out, err = runKeel(t, "config", "describe", "--controllers", addr, "-o", "json")
	if err != nil || !strings.Contains(out, `"source": "cluster_default"`) {
		t.Fatalf("config describe -o json: %v\n%s", err, out)
	}
}
