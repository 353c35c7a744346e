package integration

// The controllers' admin APIs through the Kafka protocol, as operators'
// tools call them (franz-go's kadm): elections, partition reassignments,
// the quorum's description and metadata.version, sent to a broker's Kafka
// listener and forwarded to the active controller.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
)

// partitionMeta is one partition as a broker's Metadata answers it.
func partitionMeta(t *testing.T, adm *kadm.Client, topic string, p int32) kadm.PartitionDetail {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[topic].Partitions[p]
}

// TestCtlAdmin_ElectLeadersAndReassign: a preferred election through
// kadm moves the leadership back to the preferred replica after a
// controlled shutdown moved it away, and a second one is
// ELECTION_NOT_NEEDED; a reassignment is listed until done and then shows
// in Metadata's replicas; one that cannot finish (its new replica is down)
// is listed with its adding and removing replicas, and cancelled; a second
// cancel is NO_REASSIGNMENT_IN_PROGRESS.
func TestCtlAdmin_ElectLeadersAndReassign(t *testing.T) {
	c, kafka := startKafkaCluster(t, threeBrokers)
	c.createTopic(t, "moves", "--assignment", "0:1,2")
	adm := kafkaAdmin(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set := kadm.TopicsSet{}
	set.Add("moves", 0)

	// Broker 1 stops cleanly: broker 2 takes the lead, and keeps it once
	// 1 is back in the ISR (the automatic rebalance is off).
	c.StopBroker(1)
	c.RestartBroker(1)
	c.WaitForBrokers(t, allActive(threeBrokers...))
	poll.Until(t, kafkaTimeout, "moves/0 led by 2 with 1 back in the ISR", func() bool {
		p := partitionMeta(t, adm, "moves", 0)
		return p.Leader == 2 && slices.Contains(p.ISR, 1)
	})
	elected, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := elected["moves"][0]; r.Err != nil {
		t.Fatalf("preferred election: %v (%s)", r.Err, r.ErrMessage)
	}
	poll.Until(t, kafkaTimeout, "moves/0 led by its preferred replica 1", func() bool {
		return partitionMeta(t, adm, "moves", 0).Leader == 1
	})
	elected, err = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := elected["moves"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Fatalf("second preferred election: %v (%s); want ELECTION_NOT_NEEDED", r.Err, r.ErrMessage)
	}

	// Move [1 2] to [2 3].
	var move kadm.AlterPartitionAssignmentsReq
	move.Assign("moves", 0, []int32{2, 3})
	altered, err := adm.AlterPartitionAssignments(ctx, move)
	if err != nil {
		t.Fatal(err)
	}
	if r := altered["moves"][0]; r.Err != nil {
		t.Fatalf("reassignment to [2 3]: %v (%s)", r.Err, r.ErrMessage)
	}
	poll.Until(t, kafkaTimeout, "the reassignment of moves/0 to finish", func() bool {
		listed, err := adm.ListPartitionReassignments(ctx, set)
		if err != nil {
			t.Fatal(err)
		}
		_, moving := listed["moves"][0]
		return !moving
	})
	poll.Until(t, kafkaTimeout, "Metadata to show moves/0 on [2 3]", func() bool {
		return slices.Equal(partitionMeta(t, adm, "moves", 0).Replicas, []int32{2, 3})
	})

	// A move to broker 1 while it is down cannot finish: listed, then
	// cancelled.
	c.StopBroker(1)
	move = nil
	move.Assign("moves", 0, []int32{1, 2})
	if altered, err = adm.AlterPartitionAssignments(ctx, move); err != nil || altered["moves"][0].Err != nil {
		t.Fatalf("reassignment to [1 2] with 1 down: %v, %+v", err, altered)
	}
	listed, err := adm.ListPartitionReassignments(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := listed["moves"][0]
	if !ok || !slices.Equal(r.AddingReplicas, []int32{1}) || !slices.Equal(r.RemovingReplicas, []int32{3}) {
		t.Fatalf("listed %+v; want moves/0 adding [1], removing [3]", listed)
	}
	var cancelMove kadm.AlterPartitionAssignmentsReq
	cancelMove.CancelAssign("moves", 0)
	if altered, err = adm.AlterPartitionAssignments(ctx, cancelMove); err != nil || altered["moves"][0].Err != nil {
		t.Fatalf("cancel: %v, %+v", err, altered)
	}
	if listed, err = adm.ListPartitionReassignments(ctx, set); err != nil || len(listed) != 0 {
		t.Fatalf("listed after the cancel: %+v, %v; want none", listed, err)
	}
	poll.Until(t, kafkaTimeout, "Metadata to show moves/0 back on [2 3]", func() bool {
		return slices.Equal(partitionMeta(t, adm, "moves", 0).Replicas, []int32{2, 3})
	})
	altered, err = adm.AlterPartitionAssignments(ctx, cancelMove)
	if err != nil {
		t.Fatal(err)
	}
	if r := altered["moves"][0]; !errors.Is(r.Err, kerr.NoReassignmentInProgress) {
		t.Fatalf("second cancel: %v (%s); want NO_REASSIGNMENT_IN_PROGRESS", r.Err, r.ErrMessage)
	}
}

// describeQuorum sends DescribeQuorum (v2) for the metadata log through
// cl.
func describeQuorum(ctx context.Context, cl *kgo.Client) (*kmsg.DescribeQuorumResponse, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{kmsg.NewDescribeQuorumRequestTopicPartition()}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, errors.New("DescribeQuorum answered no partition")
	}
	return resp, nil
}

// TestCtlAdmin_DescribeQuorum: DescribeQuorum on a broker's Kafka
// listener names the active controller `keel quorum` names, with its raft
// term, three voters and their log end offsets; once that controller is
// killed, it names the new one with a higher epoch.
func TestCtlAdmin_DescribeQuorum(t *testing.T) {
	c, kafka := startKafkaCluster(t, []int32{1})
	cl := kafkaClient(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	view, err := c.Client().DescribeQuorum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := describeQuorum(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.LeaderID != view.ActiveID || uint64(p.LeaderEpoch) != view.Leader.GetRaftTerm() {
		t.Fatalf("DescribeQuorum: leader %d in epoch %d; keel quorum: %d in term %d", p.LeaderID, p.LeaderEpoch, view.ActiveID, view.Leader.GetRaftTerm())
	}
	if len(p.CurrentVoters) != 3 || p.HighWatermark <= 0 || len(resp.Nodes) != 3 {
		t.Fatalf("DescribeQuorum: %+v, nodes %+v; want 3 voters, a high watermark, 3 nodes", p, resp.Nodes)
	}
	for _, v := range p.CurrentVoters {
		if v.LogEndOffset <= 0 {
			t.Errorf("voter %d: log end offset %d", v.ReplicaID, v.LogEndOffset)
		}
	}

	old := p
	c.Kill(old.LeaderID)
	poll.Until(t, 60*time.Second, "DescribeQuorum to name a new leader", func() bool {
		resp, err := describeQuorum(ctx, cl)
		if err != nil {
			t.Logf("DescribeQuorum during the failover: %v", err)
			return false
		}
		p = resp.Topics[0].Partitions[0]
		return p.LeaderID != old.LeaderID
	})
	if p.LeaderEpoch <= old.LeaderEpoch {
		t.Fatalf("new leader %d in epoch %d; the old one led in %d", p.LeaderID, p.LeaderEpoch, old.LeaderEpoch)
	}
	view, err = c.Client().DescribeQuorum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.LeaderID != view.ActiveID {
		t.Fatalf("DescribeQuorum names %d; keel quorum %d", p.LeaderID, view.ActiveID)
	}
}

// finalizedLevel is the metadata.version a broker's ApiVersions answers
// as finalized; -1 when it answers none.
func finalizedLevel(v kadm.BrokerApiVersions) int16 {
	for _, f := range v.Raw().FinalizedFeatures {
		if f.Name == "metadata.version" {
			return f.MaxVersionLevel
		}
	}
	return -1
}

// TestCtlAdmin_UpdateFeatures: through kadm, a validate-only raise of
// metadata.version changes nothing, a real one changes the finalized level
// every broker's ApiVersions answers; an unknown feature and a lowering
// without a downgrade type are INVALID_UPDATE_VERSION.
func TestCtlAdmin_UpdateFeatures(t *testing.T) {
	_, kafka := startKafkaCluster(t, threeBrokers, withControllerFlags("--initial-metadata-version", "1"))
	adm := kafkaAdmin(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	levels := func() map[int32]int16 {
		t.Helper()
		vs, err := adm.ApiVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int16{}
		for id, v := range vs {
			if v.Err != nil {
				t.Fatalf("ApiVersions of broker %d: %v", id, v.Err)
			}
			out[id] = finalizedLevel(v)
		}
		return out
	}
	everyBrokerAt := func(level int16) func() bool {
		return func() bool {
			got := levels()
			for _, id := range threeBrokers {
				if got[id] != level {
					return false
				}
			}
			return true
		}
	}
	if !everyBrokerAt(1)() {
		t.Fatalf("finalized levels %v; want 1 on every broker", levels())
	}

	up := kadm.FeatureUpdate{Feature: "metadata.version", MaxVersionLevel: 2, UpgradeType: 1}
	res, err := adm.UpdateFeatures(ctx, true, up)
	if err != nil || res.Error() != nil {
		t.Fatalf("validate-only raise to 2: %v, %+v", err, res)
	}
	if !everyBrokerAt(1)() {
		t.Fatalf("finalized levels %v after a validate-only raise; want 1", levels())
	}
	if res, err = adm.UpdateFeatures(ctx, false, up); err != nil || res.Error() != nil {
		t.Fatalf("raise to 2: %v, %+v", err, res)
	}
	poll.Until(t, 10*time.Second, "every broker's ApiVersions to finalize metadata.version 2", everyBrokerAt(2))

	res, err = adm.UpdateFeatures(ctx, false,
		kadm.FeatureUpdate{Feature: "no.such.feature", MaxVersionLevel: 1, UpgradeType: 1})
	if err != nil || !errors.Is(res["no.such.feature"].Err, kerr.InvalidUpdateVersion) {
		t.Errorf("unknown feature: %v, %+v; want INVALID_UPDATE_VERSION", err, res)
	}
	res, err = adm.UpdateFeatures(ctx, false, kadm.FeatureUpdate{Feature: "metadata.version", MaxVersionLevel: 1, UpgradeType: 1})
	if err != nil || !errors.Is(res["metadata.version"].Err, kerr.InvalidUpdateVersion) {
		t.Errorf("lowering as an upgrade: %v, %+v; want INVALID_UPDATE_VERSION", err, res)
	}
	if !everyBrokerAt(2)() {
		t.Fatalf("finalized levels %v after refused updates; want 2", levels())
	}
}

// TestCtlAdmin_AlterNeedsAdmin: with TLS, a Kafka client holding an
// application's certificate and no ACL is refused elections,
// reassignments, feature updates and describing the quorum
// (CLUSTER_AUTHORIZATION_FAILED); an admin's certificate is forwarded with
// its principal, which the controller accepts.
func TestCtlAdmin_AlterNeedsAdmin(t *testing.T) {
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, []int32{1}, withTLS(pki))
	c.createTopic(t, "guarded", "--partitions", "1", "--replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set := kadm.TopicsSet{}
	set.Add("guarded", 0)

	other := kadm.NewClient(kafkaClient(t, kafka, appTLS(t, pki, "app-orders")))
	var ae *kadm.AuthError
	if _, err := other.ElectLeaders(ctx, kadm.ElectPreferredReplica, set); !errors.As(err, &ae) || !errors.Is(ae.Err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("ElectLeaders with an application's certificate: %v; want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	var move kadm.AlterPartitionAssignmentsReq
	move.Assign("guarded", 0, []int32{1})
	if _, err := other.AlterPartitionAssignments(ctx, move); !errors.As(err, &ae) || !errors.Is(ae.Err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("AlterPartitionAssignments with an application's certificate: %v; want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	up := kadm.FeatureUpdate{Feature: "metadata.version", MaxVersionLevel: 2, UpgradeType: 1}
	if _, err := other.UpdateFeatures(ctx, true, up); !errors.As(err, &ae) || !errors.Is(ae.Err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("UpdateFeatures with an application's certificate: %v; want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if _, err := describeQuorum(ctx, kafkaClient(t, kafka, appTLS(t, pki, "app-orders"))); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("DescribeQuorum with an application's certificate: %v; want CLUSTER_AUTHORIZATION_FAILED", err)
	}

	admin := kadm.NewClient(kafkaClient(t, kafka, kafkaTLS(pki, "admin-alice")))
	elected, err := admin.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := elected["guarded"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Errorf("ElectLeaders with admin-alice's certificate: %v (%s); want ELECTION_NOT_NEEDED, the controller's answer", r.Err, r.ErrMessage)
	}
	vs, err := admin.ApiVersions(ctx)
	if err != nil || vs[1].Err != nil {
		t.Fatalf("ApiVersions: %v, %+v", err, vs)
	}
	// The level in force: the controller answers without writing.
	res, err := admin.UpdateFeatures(ctx, true, kadm.FeatureUpdate{Feature: "metadata.version", MaxVersionLevel: finalizedLevel(vs[1]), UpgradeType: 1})
	if err != nil || res.Error() != nil {
		t.Errorf("validate-only UpdateFeatures with admin-alice's certificate: %v, %+v", err, res)
	}
}

// TestCtlAdmin_BadInput: bad items in the controllers' admin requests get
// a clear error each, and change nothing: an election of a partition named
// twice, a negative one, an unknown topic, an unknown election type; a
// reassignment to an empty list, to a broker named twice, to a broker that
// does not exist; a feature named twice, an unknown one, an unknown
// upgrade type; a DescribeQuorum of another partition than the metadata
// log's.
func TestCtlAdmin_BadInput(t *testing.T) {
	c, kafka := startKafkaCluster(t, []int32{1})
	c.createTopic(t, "steady", "--partitions", "2", "--replication-factor", "1")
	cl := kafkaClient(t, kafka)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type answer struct {
		code int16
		msg  string
	}
	check := func(what string, got answer, want *kerr.Error) {
		t.Helper()
		if got.code != want.Code || got.msg == "" {
			t.Errorf("%s: %v %q; want %s with a message", what, kerr.ErrorForCode(got.code), got.msg, want.Message)
		}
	}

	el := kmsg.NewPtrElectLeadersRequest()
	el.TimeoutMillis = 30_000
	el.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "steady", Partitions: []int32{1, 1, -1}}, {Topic: "nosuch", Partitions: []int32{0}}}
	resp, err := el.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]answer{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			got[fmt.Sprintf("%s/%d", rt.Topic, p.Partition)] = answer{p.ErrorCode, deref(p.ErrorMessage)}
		}
	}
	if len(got) != 3 {
		t.Errorf("ElectLeaders answered %v; want 3 partitions", got)
	}
	check("a partition named twice", got["steady/1"], kerr.InvalidRequest)
	check("a negative partition", got["steady/-1"], kerr.UnknownTopicOrPartition)
	check("an unknown topic", got["nosuch/0"], kerr.UnknownTopicOrPartition)
	el.ElectionType = 9
	el.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "steady", Partitions: []int32{0}}}
	if resp, err = el.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	check("an unknown election type", answer{resp.ErrorCode, deref(resp.Topics[0].Partitions[0].ErrorMessage)}, kerr.InvalidRequest)

	var move kadm.AlterPartitionAssignmentsReq
	move.Assign("steady", 0, []int32{})
	move.Assign("steady", 1, []int32{1, 1})
	move.Assign("nosuch", 0, []int32{1})
	move.Assign("steady", -1, []int32{1})
	altered, err := adm.AlterPartitionAssignments(ctx, move)
	if err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]struct {
		got  kadm.AlterPartitionAssignmentsResponse
		want *kerr.Error
	}{
		"an empty replica list": {altered["steady"][0], kerr.InvalidReplicaAssignment},
		"a broker named twice":  {altered["steady"][1], kerr.InvalidReplicaAssignment},
		"an unknown topic":      {altered["nosuch"][0], kerr.UnknownTopicOrPartition},
		"a negative partition":  {altered["steady"][-1], kerr.UnknownTopicOrPartition},
	} {
		if !errors.Is(r.got.Err, r.want) || r.got.ErrMessage == "" {
			t.Errorf("reassignment with %s: %v %q; want %s with a message", what, r.got.Err, r.got.ErrMessage, r.want.Message)
		}
	}
	move = nil
	move.Assign("steady", 0, []int32{7})
	if altered, err = adm.AlterPartitionAssignments(ctx, move); err != nil || !errors.Is(altered["steady"][0].Err, kerr.InvalidReplicaAssignment) {
		t.Errorf("reassignment to an unknown broker: %v, %+v; want INVALID_REPLICA_ASSIGNMENT", err, altered)
	}
	all := kadm.TopicsSet{}
	all.Add("steady", 0, 1)
	if listed, err := adm.ListPartitionReassignments(ctx, all); err != nil || len(listed) != 0 {
		t.Errorf("reassignments after refused ones: %+v, %v; want none", listed, err)
	}
	for _, p := range []int32{0, 1} {
		if r := partitionMeta(t, adm, "steady", p).Replicas; !slices.Equal(r, []int32{1}) {
			t.Errorf("steady/%d on %v after refused reassignments; want [1]", p, r)
		}
	}

	uf := kmsg.NewPtrUpdateFeaturesRequest()
	uf.TimeoutMillis = 30_000
	uf.FeatureUpdates = []kmsg.UpdateFeaturesRequestFeatureUpdate{
		{Feature: "metadata.version", MaxVersionLevel: 1, UpgradeType: 2},
		{Feature: "metadata.version", MaxVersionLevel: 1, UpgradeType: 2},
		{Feature: "no.such.feature", MaxVersionLevel: 1, UpgradeType: 1},
	}
	fresp, err := uf.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	fgot := map[string]answer{}
	for _, r := range fresp.Results {
		fgot[r.Feature] = answer{r.ErrorCode, deref(r.ErrorMessage)}
	}
	check("a feature named twice", fgot["metadata.version"], kerr.InvalidRequest)
	check("an unknown feature", fgot["no.such.feature"], kerr.InvalidUpdateVersion)
	uf.FeatureUpdates = []kmsg.UpdateFeaturesRequestFeatureUpdate{{Feature: "metadata.version", MaxVersionLevel: 1, UpgradeType: 5}}
	if fresp, err = uf.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	check("an unknown upgrade type", answer{fresp.Results[0].ErrorCode, deref(fresp.Results[0].ErrorMessage)}, kerr.InvalidUpdateVersion)
	var f featuresJSON
	c.keelJSON(t, &f, "features", "describe")
	if f.MetadataVersion != fsm.MaxMetadataVersion {
		t.Errorf("metadata.version %d after refused updates; want %d", f.MetadataVersion, fsm.MaxMetadataVersion)
	}

	dq := kmsg.NewPtrDescribeQuorumRequest()
	dq.Topics = []kmsg.DescribeQuorumRequestTopic{{Topic: "steady", Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}}}
	qresp, err := dq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	check("DescribeQuorum of another partition", answer{qresp.ErrorCode, deref(qresp.ErrorMessage)}, kerr.InvalidRequest)
}
