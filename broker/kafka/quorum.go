package kafka

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/proto/keelpb"
)

// The metadata log's name and partition as Kafka's clients ask for it in
// DescribeQuorum, and the listener name DescribeQuorum v2 gives the
// controllers' addresses.
const (
	metadataTopic        = "__cluster_metadata"
	controllerListener   = "CONTROLLER"
	describeQuorumNoTime = -1
)

// describeQuorum answers DescribeQuorum (KIP-595, KIP-853) from the active
// controller's own description, as Kafka's raft leader answers it: the
// leader is the active controller, the leader epoch its raft term (the
// epoch of the log whose indexes the offsets are), the high watermark its
// commit index, and each voter's log end offset the last index the leader
// knows it holds. Non-voting controllers are the observers.
func (s *Server) describeQuorum(ctx context.Context, c *conn, r *kmsg.DescribeQuorumRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeQuorumResponse)
	fail := func(ke *kerr.Error, msg string) kmsg.Response {
		resp.ErrorCode = ke.Code
		if r.Version >= 2 {
			resp.ErrorMessage = &msg
		}
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterResourceName) {
		return fail(kerr.ClusterAuthorizationFailed, "describing the quorum needs DESCRIBE on the cluster")
	}
	// As Kafka's raft client: one topic, the metadata log's, with its one
	// partition.
	if len(r.Topics) != 1 || r.Topics[0].Topic != metadataTopic || len(r.Topics[0].Partitions) != 1 || r.Topics[0].Partitions[0].Partition != 0 {
		return fail(kerr.InvalidRequest, "DescribeQuorum asks for the one partition of "+metadataTopic+", partition 0")
	}
	ctx, cancel := context.WithTimeout(ctx, defaultAdminTimeout)
	defer cancel()
	q, err := s.cfg.Controller.DescribeQuorum(ctx)
	if err != nil {
		return fail(adminError(err))
	}
	now := time.Now().UnixMilli()
	repl := map[int32]*keelpb.VoterReplication{}
	for _, v := range q.GetReplication() {
		repl[v.GetId()] = v
	}
	p := kmsg.NewDescribeQuorumResponseTopicPartition()
	p.LeaderID = q.GetNodeId()
	p.LeaderEpoch = int32(q.GetRaftTerm())
	p.HighWatermark = int64(q.GetCommitIndex())
	for _, m := range q.GetVoters() {
		st := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		st.ReplicaID = m.GetId()
		st.LogEndOffset, st.LastFetchTimestamp, st.LastCaughtUpTimestamp = -1, describeQuorumNoTime, describeQuorumNoTime
		if v, ok := repl[m.GetId()]; ok {
			st.LogEndOffset = int64(v.GetMatchIndex())
			if v.GetLastContactMs() >= 0 {
				st.LastFetchTimestamp = now - v.GetLastContactMs()
				// Keel knows when a voter last answered, and what it
				// held then: caught up as of that answer when it held
				// every committed entry.
				if v.GetMatchIndex() >= q.GetCommitIndex() {
					st.LastCaughtUpTimestamp = st.LastFetchTimestamp
				}
			}
		}
		if m.GetSuffrage() == "voter" {
			p.CurrentVoters = append(p.CurrentVoters, st)
		} else {
			p.Observers = append(p.Observers, st)
		}
		if r.Version >= 2 {
			resp.Nodes = append(resp.Nodes, quorumNode(m))
		}
	}
	t := kmsg.NewDescribeQuorumResponseTopic()
	t.Topic = metadataTopic
	t.Partitions = append(t.Partitions, p)
	resp.Topics = append(resp.Topics, t)
	return resp
}

// quorumNode is a controller as DescribeQuorum v2 lists it: its id and
// its one address, the raft and gRPC listener it shares.
func quorumNode(m *keelpb.QuorumMember) kmsg.DescribeQuorumResponseNode {
	n := kmsg.NewDescribeQuorumResponseNode()
	n.NodeID = m.GetId()
	host, port, err := net.SplitHostPort(m.GetAddress())
	if err != nil {
		return n
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return n
	}
	l := kmsg.NewDescribeQuorumResponseNodeListener()
	l.Name, l.Host, l.Port = controllerListener, host, uint16(pn)
	n.Listeners = append(n.Listeners, l)
	return n
}
