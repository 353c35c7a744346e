package kafka

import (
	"context"
	"net"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
)

// versionRange is the versions of one API the listener serves.
type versionRange struct{ min, max int16 }

const apiVersionsKey = 18

// versions are the APIs served and their versions (docs/kafka.md): what
// librdkafka 2.0 and franz-go need (/work/shared/DATAPLANE.md's table).
// Transactions and groups are absent, so clients neither try nor expect
// them. Produce starts at v0 because librdkafka enables compression only
// when the range holds v0; a produce below v3 (message format v0 or v1) is
// refused per partition.
var versions = map[int16]versionRange{
	0: {0, 11}, // Produce
	1: {4, 12}, // Fetch (v13+ name topics by id)
	2: {0, 7},  // ListOffsets
	3: {0, 12}, // Metadata
	// SaslHandshake and SaslAuthenticate (sasl.go) are advertised only
	// where SASL is offered. After SaslHandshake v0 the tokens come bare,
	// without SaslAuthenticate; librdkafka needs v0 in the range to use
	// SASL at all.
	17: {0, 1}, // SaslHandshake
	18: {0, 4}, // ApiVersions
	19: {0, 7}, // CreateTopics
	20: {0, 6}, // DeleteTopics
	21: {0, 2}, // DeleteRecords
	22: {0, 4}, // InitProducerId
	23: {2, 4}, // OffsetForLeaderEpoch (kgo validates after a leader change from v2: KIP-320)
	29: {0, 3}, // DescribeAcls
	30: {0, 3}, // CreateAcls
	31: {0, 3}, // DeleteAcls
	32: {0, 4}, // DescribeConfigs
	33: {0, 2}, // AlterConfigs
	35: {0, 4}, // DescribeLogDirs
	36: {0, 2}, // SaslAuthenticate
	37: {0, 3}, // CreatePartitions
	43: {0, 2}, // ElectLeaders
	44: {0, 1}, // IncrementalAlterConfigs
	45: {0, 0}, // AlterPartitionReassignments
	46: {0, 0}, // ListPartitionReassignments
	48: {0, 1}, // DescribeClientQuotas
	49: {0, 1}, // AlterClientQuotas
	50: {0, 0}, // DescribeUserScramCredentials (scram.go, KIP-554)
	51: {0, 0}, // AlterUserScramCredentials
	55: {0, 2}, // DescribeQuorum
	57: {0, 1}, // UpdateFeatures (v2 drops the per-feature results)
	60: {0, 1}, // DescribeCluster
	61: {0, 0}, // DescribeProducers
	// The group APIs (groupapi.go), served only with a coordinator
	// (Config.Groups): the classic protocol's versions, not KIP-848's
	// (OffsetCommit and OffsetFetch v9+ name member epochs).
	8:  {0, 8}, // OffsetCommit
	9:  {0, 8}, // OffsetFetch (v8: several groups)
	10: {0, 4}, // FindCoordinator (v4: several keys)
	11: {0, 9}, // JoinGroup
	12: {0, 4}, // Heartbeat
	13: {0, 5}, // LeaveGroup (v3: several members)
	14: {0, 5}, // SyncGroup
	15: {0, 5}, // DescribeGroups
	16: {0, 5}, // ListGroups (v4: states, v5: types)
	42: {0, 2}, // DeleteGroups
	47: {0, 0}, // OffsetDelete
}

func (s *Server) apiVersions(r *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	keys := make([]int16, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if (k == saslHandshakeKey || k == saslAuthenticateKey) && !s.cfg.SASL.on() {
			continue // not served on this listener
		}
		if !s.serves(k) {
			continue
		}
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: versions[k].min, MaxVersion: versions[k].max})
	}
	s.addFeatures(resp)
	return resp
}

// unsupportedApiVersions is KIP-511's answer to an ApiVersions above the
// served range: v0, UNSUPPORTED_VERSION, and ApiVersions' own range.
func unsupportedApiVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: apiVersionsKey, MinVersion: 0, MaxVersion: versions[apiVersionsKey].max}}
	return resp
}

// kafkaBroker is a broker as Kafka clients see it: a node id and the
// address of its Kafka listener.
type kafkaBroker struct {
	id   int32
	host string
	port int32
	rack *string
}

// liveBrokers are the brokers a client may talk to: registered with a
// Kafka listener, and not fenced (KRaft's metadata cache lists unfenced
// brokers only).
func liveBrokers(img *fsm.Image) []kafkaBroker {
	var out []kafkaBroker
	for _, b := range img.Brokers() {
		if b.Fenced || b.KafkaAddress == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b.KafkaAddress)
		if err != nil {
			continue
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		kb := kafkaBroker{id: b.ID, host: host, port: int32(p)}
		if b.Rack != "" {
			rack := b.Rack
			kb.rack = &rack
		}
		out = append(out, kb)
	}
	return out
}

func (s *Server) metadata(ctx context.Context, c *conn, r *kmsg.MetadataRequest) kmsg.Response {
	img := s.cfg.Image.Image()
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	live := liveBrokers(img)
	alive := map[int32]bool{}
	for _, b := range live {
		resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: b.id, Host: b.host, Port: b.port, Rack: b.rack})
		alive[b.id] = true
	}
	if img.ClusterID != "" {
		id := img.ClusterID
		resp.ClusterID = &id
	}
	// Admin requests go to the controller id; this broker forwards them
	// to the active controller, as a KRaft broker does.
	resp.ControllerID = s.cfg.BrokerID

	// v0: an empty list is every topic; v1+: null is every topic.
	all := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	if all {
		// Kafka leaves out the topics the client may not describe.
		for _, t := range img.Topics() {
			if s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name) {
				resp.Topics = append(resp.Topics, topicMetadata(img, t, alive))
			}
		}
		return resp
	}
	autoCreate := autoCreates(img, r)
	ctx, cancel := context.WithTimeout(ctx, autoCreateBudget)
	defer cancel()
	for _, rt := range r.Topics {
		var t *fsm.Topic
		ok := false
		switch {
		case rt.Topic != nil:
			t, ok = img.Topic(*rt.Topic)
		case rt.TopicID != [16]byte{}:
			t, ok = img.TopicByID(fsm.TopicID(rt.TopicID))
		}
		// A named topic the client may not describe is refused whether or
		// not it exists, so that its existence is not told (Kafka).
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		} else if ok {
			name = t.Name
		}
		if (rt.Topic != nil || ok) && !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name) {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
			mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		if !ok && autoCreate && rt.Topic != nil {
			resp.Topics = append(resp.Topics, s.autoCreate(ctx, c, *rt.Topic, alive))
			continue
		}
		if !ok {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if rt.Topic == nil {
				mt.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, topicMetadata(img, t, alive))
	}
	return resp
}

// topicMetadata describes t's partitions: leader, leader epoch, replicas,
// ISR and offline replicas (those not live), as the broker's image has
// them. A partition without a live leader says LEADER_NOT_AVAILABLE, and a
// client asks again.
func topicMetadata(img *fsm.Image, t *fsm.Topic, alive map[int32]bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic, mt.TopicID = &name, [16]byte(t.ID)
	mt.IsInternal = fsm.IsInternalTopic(name)
	for _, p := range img.Partitions(t.ID) {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = p.Partition, p.Leader, p.LeaderEpoch
		mp.Replicas = slices.Clone(p.Replicas)
		mp.ISR = slices.Clone(p.ISR)
		for _, id := range p.Replicas {
			if !alive[id] {
				mp.OfflineReplicas = append(mp.OfflineReplicas, id)
			}
		}
		if p.Leader == fsm.NoLeader || !alive[p.Leader] {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

func (s *Server) describeCluster(c *conn, r *kmsg.DescribeClusterRequest) kmsg.Response {
	img := s.cfg.Image.Image()
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, acl.ClusterName) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	if r.Version >= 1 && r.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		msg := "this listener describes brokers only (endpoint type 1)"
		resp.ErrorMessage = &msg
		return resp
	}
	resp.EndpointType = 1
	resp.ClusterID = img.ClusterID
	resp.ControllerID = s.cfg.BrokerID
	for _, b := range liveBrokers(img) {
		resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: b.id, Host: b.host, Port: b.port, Rack: b.rack})
	}
	return resp
}

// authorizedLeader is leaderCheck for a topic the client may (denied:
// may not) describe.
func authorizedLeader(s *Server, img *fsm.Image, denied bool, topic string, partition int32) *kerr.Error {
	if denied {
		return kerr.TopicAuthorizationFailed
	}
	return s.leaderCheck(img, topic, partition)
}

// leaderCheck is the image's answer to "may this broker serve topic's
// partition as its leader?": nil, or the Kafka error a client acts on.
func (s *Server) leaderCheck(img *fsm.Image, topic string, partition int32) *kerr.Error {
	t, ok := img.Topic(topic)
	if !ok || partition < 0 || partition >= t.Partitions {
		return kerr.UnknownTopicOrPartition
	}
	p, ok := img.Partition(t.ID, partition)
	switch {
	case !ok:
		return kerr.UnknownTopicOrPartition
	case p.Leader == fsm.NoLeader:
		return kerr.LeaderNotAvailable
	case p.Leader != s.cfg.BrokerID:
		return kerr.NotLeaderForPartition
	}
	return nil
}
