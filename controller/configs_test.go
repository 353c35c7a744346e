package controller

import (
	"errors"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func topicResource(name string) *keelpb.ConfigResource {
	return &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: name}
}

var clusterResource = &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}

func set(name, value string) *keelpb.AlterableConfig {
	return &keelpb.AlterableConfig{Name: name, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: value}
}

func del(name string) *keelpb.AlterableConfig {
	return &keelpb.AlterableConfig{Name: name, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE}
}

func alterReq(r *keelpb.ConfigResource, cs ...*keelpb.AlterableConfig) *keelpb.IncrementalAlterConfigsRequest {
	return &keelpb.IncrementalAlterConfigsRequest{Resource: r, Configs: cs}
}

// configsOf returns the config records of recs as "resource/name=value"
// ("resource/name deleted").
func configsOf(recs []*keelpb.Record) []string {
	var out []string
	for _, r := range recs {
		c := r.GetConfig()
		if c == nil {
			continue
		}
		s := c.GetResourceName() + "/" + c.GetName()
		if c.Value == nil {
			s += " deleted"
		} else {
			s += "=" + c.GetValue()
		}
		out = append(out, s)
	}
	return out
}

// TestConfigurationControlManager_IncrementalAlterConfigs: Kafka's
// testIncrementalAlterConfigs, testIncrementalAlterConfig and
// testIncrementalAlterConfigsWithoutExistence in Keel's terms: one record
// per config whose value changes, SET values in canonical form, DELETE of
// what is set, an unknown topic or config refused whole, replayed into the
// FSM.
func TestConfigurationControlManager_IncrementalAlterConfigs(t *testing.T) {
	img := fixture(t, false)
	steps := []struct {
		name      string
		req       *keelpb.IncrementalAlterConfigsRequest
		want      []string
		wantErr   error
		wantField string
	}{
		{name: "set a topic's configs", req: alterReq(topicResource("t"), set(fsm.MinInsyncReplicas, " 2"), set(fsm.UncleanLeaderElection, "TRUE")),
			want: []string{"t/min.insync.replicas=2", "t/unclean.leader.election.enable=true"}},
		{name: "setting the same value again writes nothing", req: alterReq(topicResource("t"), set(fsm.MinInsyncReplicas, "2"))},
		{name: "delete one, set another", req: alterReq(topicResource("t"), del(fsm.MinInsyncReplicas), set(fsm.RetentionMs, "-1")),
			want: []string{"t/min.insync.replicas deleted", "t/retention.ms=-1"}},
		{name: "deleting what is not set writes nothing", req: alterReq(topicResource("t"), del(fsm.SegmentBytes))},
		{name: "a cluster default", req: alterReq(clusterResource, set(fsm.RetentionBytes, "1073741824"), set(fsm.CleanupPolicy, "delete")),
			want: []string{"/retention.bytes=1073741824", "/cleanup.policy=delete"}},
		{name: "an unknown topic", req: alterReq(topicResource("nope"), set(fsm.RetentionMs, "1")), wantErr: ErrUnknownTopic},
		{name: "an unknown config, with a good one: nothing", req: alterReq(topicResource("t"), set(fsm.RetentionMs, "5"), set("retention.hours", "1")), wantField: "configs[1]"},
		{name: "a bad value", req: alterReq(clusterResource, set(fsm.MaxMessageBytes, "-1")), wantField: "configs[0]"},
		{name: "a config not supported", req: alterReq(clusterResource, set("max.compaction.lag.ms", "60000")), wantField: "configs[0]"},
		{name: "a broker config on a topic", req: alterReq(topicResource("t"), set(fsm.LeaderReplicationThrottledRate, "1")), wantField: "configs[0]"},
		{name: "a config twice", req: alterReq(clusterResource, set(fsm.RetentionMs, "1"), del(fsm.RetentionMs)), wantField: "configs[1]"},
		{name: "the cluster by a name", req: alterReq(&keelpb.ConfigResource{Type: clusterResource.Type, Name: "0"}, set(fsm.RetentionMs, "1")), wantField: "resource.name"},
	}
	for _, s := range steps {
		recs, next, _, err := alterConfigsRecords(img, s.req)
		var fe *FieldError
		switch {
		case s.wantErr != nil:
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
			}
			continue
		case s.wantField != "":
			if !errors.As(err, &fe) || fe.Field != s.wantField {
				t.Fatalf("%s: err = %v, want a refusal naming %s", s.name, err, s.wantField)
			}
			continue
		case err != nil:
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := configsOf(recs); !slices.Equal(got, s.want) {
			t.Fatalf("%s: records %v, want %v", s.name, got, s.want)
		}
		// The decision's own image is what replaying its records gives.
		img = apply(t, img, recs)
		if !sameConfigs(img, next) {
			t.Fatalf("%s: the decision's image differs from the replay", s.name)
		}
	}
	tp, _ := img.Topic("t")
	want := map[string]fsm.ConfigValue{
		fsm.UncleanLeaderElection: {Name: fsm.UncleanLeaderElection, Value: "true", Source: fsm.SourceTopic},
		fsm.RetentionMs:           {Name: fsm.RetentionMs, Value: "-1", Source: fsm.SourceTopic},
		fsm.RetentionBytes:        {Name: fsm.RetentionBytes, Value: "1073741824", Source: fsm.SourceClusterDefault},
		fsm.MinInsyncReplicas:     {Name: fsm.MinInsyncReplicas, Value: "1", Source: fsm.SourceDefault},
	}
	for _, v := range img.TopicConfigs(tp) {
		if w, ok := want[v.Name]; ok && v != w {
			t.Errorf("%s: %+v, want %+v", v.Name, v, w)
		}
	}
}

func listOp(op keelpb.AlterConfigOp, name, value string) *keelpb.AlterableConfig {
	return &keelpb.AlterableConfig{Name: name, Op: op, Value: value}
}

// TestConfigurationControlManager_AppendAndSubtract: Kafka's APPEND and
// SUBTRACT on a list config, from the resource's own value, else the
// built-in default; a list emptied, or a config that is no list, refused.
func TestConfigurationControlManager_AppendAndSubtract(t *testing.T) {
	const appendOp, subtractOp = keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND, keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT
	img := fixture(t, false)
	steps := []struct {
		name      string
		req       *keelpb.IncrementalAlterConfigsRequest
		want      []string
		wantField string
	}{
		{name: "append to the default", req: alterReq(topicResource("t"), listOp(appendOp, fsm.CleanupPolicy, "delete")),
			want: []string{"t/cleanup.policy=delete"}},
		{name: "append what is there writes nothing", req: alterReq(topicResource("t"), listOp(appendOp, fsm.CleanupPolicy, " delete,delete"))},
		{name: "subtract what is not there writes nothing", req: alterReq(topicResource("t"), listOp(subtractOp, fsm.CleanupPolicy, "compact"))},
		{name: "subtract the last item", req: alterReq(topicResource("t"), listOp(subtractOp, fsm.CleanupPolicy, "delete")), wantField: "configs[0]"},
		{name: "append an item the config does not take", req: alterReq(clusterResource, listOp(appendOp, fsm.CleanupPolicy, "Compact")), wantField: "configs[0]"},
		{name: "append to a number", req: alterReq(clusterResource, listOp(appendOp, fsm.RetentionMs, "1")), wantField: "configs[0]"},
	}
	for _, s := range steps {
		recs, _, _, err := alterConfigsRecords(img, s.req)
		var fe *FieldError
		if s.wantField != "" {
			if !errors.As(err, &fe) || fe.Field != s.wantField {
				t.Fatalf("%s: err = %v, want a refusal naming %s", s.name, err, s.wantField)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := configsOf(recs); !slices.Equal(got, s.want) {
			t.Fatalf("%s: records %v, want %v", s.name, got, s.want)
		}
		img = apply(t, img, recs)
	}
}

// TestConfigurationControlManager_LegacyAlterConfigs (Kafka's
// testLegacyAlterConfigs): replace sets the configs named and deletes the
// resource's other own configs in the same decision; one bad config
// refuses it whole; a delete among them is refused.
func TestConfigurationControlManager_LegacyAlterConfigs(t *testing.T) {
	img := fixture(t, false)
	img = apply(t, img, mustRecords(t, img, alterReq(topicResource("t"), set(fsm.RetentionMs, "5"), set(fsm.UncleanLeaderElection, "true"))))
	replace := func(r *keelpb.ConfigResource, cs ...*keelpb.AlterableConfig) *keelpb.IncrementalAlterConfigsRequest {
		req := alterReq(r, cs...)
		req.Replace = true
		return req
	}
	var fe *FieldError
	if _, _, _, err := alterConfigsRecords(img, replace(topicResource("t"), set(fsm.SegmentBytes, "1"))); !errors.As(err, &fe) || fe.Field != "configs[0]" {
		t.Fatalf("a bad value: err = %v, want a refusal naming configs[0]", err)
	}
	if _, _, _, err := alterConfigsRecords(img, replace(topicResource("t"), del(fsm.RetentionMs))); !errors.As(err, &fe) || fe.Field != "configs[0].op" {
		t.Fatalf("a delete: err = %v, want a refusal naming configs[0].op", err)
	}
	recs, _, _, err := alterConfigsRecords(img, replace(topicResource("t"), set(fsm.RetentionMs, "5"), set(fsm.MinInsyncReplicas, "2")))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := configsOf(recs), []string{"t/min.insync.replicas=2", "t/unclean.leader.election.enable deleted"}; !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	img = apply(t, img, recs)
	recs, _, _, err = alterConfigsRecords(img, replace(topicResource("t")))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := configsOf(recs), []string{"t/min.insync.replicas deleted", "t/retention.ms deleted"}; !slices.Equal(got, want) {
		t.Fatalf("replacing with nothing: records %v, want %v", got, want)
	}
}

func mustRecords(t *testing.T, img *fsm.Image, req *keelpb.IncrementalAlterConfigsRequest) []*keelpb.Record {
	t.Helper()
	recs, _, _, err := alterConfigsRecords(img, req)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func sameConfigs(a, b *fsm.Image) bool {
	for _, t := range a.Topics() {
		u, ok := b.Topic(t.Name)
		if !ok || !slices.Equal(a.TopicConfigs(t), b.TopicConfigs(u)) {
			return false
		}
	}
	return slices.Equal(a.ClusterDefaults(), b.ClusterDefaults())
}

// TestReplicationControlManager_MaybeTriggerUncleanLeaderElectionForLeaderlessPartitions
// (testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions): replicas
// [1 2 4], [1 3 4], [0 2 4], every broker fenced, then 2 back: partitions
// 0 and 2 can have 2 as an unclean leader. Set on the topic or as the
// cluster default, turning unclean.leader.election.enable on elects them in
// the same decision; already on ("static"), the unfencing elected them.
// Kafka's per-node configs have no Keel counterpart.
func TestReplicationControlManager_MaybeTriggerUncleanLeaderElectionForLeaderlessPartitions(t *testing.T) {
	for _, how := range []string{"none", "static", "dynamic_cluster", "dynamic_topic"} {
		t.Run(how, func(t *testing.T) {
			var batches [][]*keelpb.Record
			batches = append(batches, clusterStart())
			for id := range int32(5) {
				batches = append(batches, []*keelpb.Record{regRecord(id, incA)})
			}
			if how == "static" {
				batches = append(batches, []*keelpb.Record{{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
					ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: fsm.UncleanLeaderElection, Value: strPtr("true")}}}})
			}
			img := imageWith(t, batches...)
			img = unfenceOne(t, img, 0, 1, 2, 3, 4)
			recs, err := createTopicRecords(img, &keelpb.CreateTopicRequest{Name: "foo", Assignments: []*keelpb.PartitionAssignment{
				{Replicas: []int32{1, 2, 4}}, {Replicas: []int32{1, 3, 4}}, {Replicas: []int32{0, 2, 4}}}}, elrTopic, 0)
			if err != nil {
				t.Fatal(err)
			}
			img = apply(t, img, recs)
			img = fenceOne(t, img, 0, 1, 2, 3, 4)
			for p := range int32(3) {
				if q, _ := img.Partition(elrTopic, p); q.Leader != fsm.NoLeader || !slices.Equal(q.ISR, []int32{4}) {
					t.Fatalf("partition %d after fencing all: %+v", p, q)
				}
			}
			img = unfenceOne(t, img, 2)
			var elections []Election
			switch how {
			case "dynamic_cluster", "dynamic_topic":
				r := clusterResource
				if how == "dynamic_topic" {
					r = topicResource("foo")
				}
				recs, _, elections, err = alterConfigsRecords(img, alterReq(r, set(fsm.UncleanLeaderElection, "true")))
				if err != nil {
					t.Fatal(err)
				}
				img = apply(t, img, recs)
			}
			want := map[int32]partState{0: {fsm.NoLeader, []int32{4}}, 1: {fsm.NoLeader, []int32{4}}, 2: {fsm.NoLeader, []int32{4}}}
			if how != "none" {
				want[0], want[2] = partState{2, []int32{2}}, partState{2, []int32{2}}
			}
			for p, w := range want {
				q, _ := img.Partition(elrTopic, p)
				if got := (partState{q.Leader, q.ISR}); !equalState(got, w) {
					t.Errorf("partition %d: %v, want %v", p, got, w)
				}
				if q.HasLeader() && !q.Recovering() {
					t.Errorf("partition %d was elected uncleanly but is not RECOVERING", p)
				}
			}
			if how == "dynamic_cluster" || how == "dynamic_topic" {
				if len(elections) != 2 || elections[0].Partition != 0 || elections[1].Partition != 2 || elections[0].Leader != 2 {
					t.Errorf("elections %+v", elections)
				}
			}
		})
	}
}

func strPtr(s string) *string { return &s }

// TestConfigurationControlManager_MinIsrChangeClearsElr: KIP-966 as Kafka
// 4 applies it: a changed min.insync.replicas clears the ELR of the
// partitions of exactly the topics whose value in effect it changes (a
// topic's own, or, for the cluster default, a topic without its own whose
// value moves), before the new value commits.
func TestConfigurationControlManager_MinIsrChangeClearsElr(t *testing.T) {
	start := elrPartition{replicas: []int32{0, 1, 2}, isr: []int32{0}, elr: []int32{1, 2}, leader: 0}
	for _, tt := range []struct {
		name    string
		topic   map[string]string
		req     *keelpb.IncrementalAlterConfigsRequest
		cleared bool
	}{
		{name: "the topic's", topic: minISR(2), req: alterReq(topicResource("e"), set(fsm.MinInsyncReplicas, "3")), cleared: true},
		{name: "the topic's, deleted", topic: minISR(2), req: alterReq(topicResource("e"), del(fsm.MinInsyncReplicas)), cleared: true},
		{name: "the topic's, unchanged", topic: minISR(2), req: alterReq(topicResource("e"), set(fsm.MinInsyncReplicas, "2"))},
		{name: "the cluster default under the topic's own", topic: minISR(2), req: alterReq(clusterResource, set(fsm.MinInsyncReplicas, "3"))},
		{name: "the cluster default the topic follows", req: alterReq(clusterResource, set(fsm.MinInsyncReplicas, "3")), cleared: true},
		{name: "another config", topic: minISR(2), req: alterReq(topicResource("e"), set(fsm.RetentionMs, "1"))},
		// Exactly the topics whose value in effect changes: setting the
		// cluster default to the built-in value a topic follows, or a
		// topic's own to the value it had, leaves the ELR alone.
		{name: "the cluster default set to the value in effect", req: alterReq(clusterResource, set(fsm.MinInsyncReplicas, "1"))},
		{name: "the topic's own set to the value in effect", req: alterReq(topicResource("e"), set(fsm.MinInsyncReplicas, "1"))},
		{name: "the topic's own deleted to the same default", topic: minISR(1), req: alterReq(topicResource("e"), del(fsm.MinInsyncReplicas))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := elrImage(t, []int32{0, 1, 2}, tt.topic, start)
			recs, _, _, err := alterConfigsRecords(img, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if tt.cleared && (len(recs) == 0 || recs[0].GetPartitionChange() == nil) {
				t.Fatalf("records %v: the ELR clear must come first", recs)
			}
			img = apply(t, img, recs)
			want := start.elr
			if tt.cleared {
				want = nil
			}
			if p := elrOf(img); !slices.Equal(p.ELR(), want) || p.Leader != 0 || !slices.Equal(p.ISR, []int32{0}) {
				t.Fatalf("partition: leader %d isr %v elr %v; want elr %v", p.Leader, p.ISR, p.ELR(), want)
			}
		})
	}
}

// TestReplicationControlManager_PreferredElectionDoesNotTriggerUncleanElection
// (testPreferredElectionDoesNotTriggerUncleanElection).
func TestReplicationControlManager_PreferredElectionDoesNotTriggerUncleanElection(t *testing.T) {
	img := elrImage(t, []int32{1, 2, 3, 4}, map[string]string{fsm.UncleanLeaderElection: "false"},
		elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}, leader: 1})
	img = fenceOne(t, img, 2, 3, 1)
	img = unfenceOne(t, img, 2)
	checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{1}, lastKnown: []int32{1}})
	recs, _, _, err := alterConfigsRecords(img, &keelpb.IncrementalAlterConfigsRequest{
		Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: "e"},
		Configs:  []*keelpb.AlterableConfig{{Name: fsm.UncleanLeaderElection, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: "true"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Turning unclean election on elects at once (KRaft does it right
	// after); a preferred election afterwards has nothing to do, and never
	// elects uncleanly by itself.
	img = apply(t, img, recs)
	checkPartition(t, img, elrPartition{leader: 2, isr: []int32{2}, state: recovering})
	if rec, _, err := electionRecord(img, elrOf(img), keelpb.ElectionType_ELECTION_TYPE_PREFERRED); rec != nil || err != ErrPreferredNotReady {
		t.Fatalf("preferred election: %v, %v", rec, err)
	}
}
