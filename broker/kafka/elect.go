package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// clusterResourceName is the name of Kafka's one CLUSTER resource.
const clusterResourceName = "kafka-cluster"

// electionErrors are the Kafka errors a controller names for a partition
// it did not elect (ElectionResult.reason).
var electionErrors = map[string]*kerr.Error{
	kerr.ElectionNotNeeded.Message:           kerr.ElectionNotNeeded,
	kerr.PreferredLeaderNotAvailable.Message: kerr.PreferredLeaderNotAvailable,
	kerr.EligibleLeadersNotAvailable.Message: kerr.EligibleLeadersNotAvailable,
	kerr.UnknownTopicOrPartition.Message:     kerr.UnknownTopicOrPartition,
	kerr.InvalidRequest.Message:              kerr.InvalidRequest,
}

// electError is adminError for an election: a request the controller
// refuses as malformed (too many partitions) is INVALID_REQUEST, whatever
// field it names.
func electError(err error) (*kerr.Error, string) {
	if status.Code(err) == codes.InvalidArgument {
		return kerr.InvalidRequest, status.Convert(err).Message()
	}
	return adminError(err)
}

// topicPartition is one partition of a request.
type topicPartition struct {
	topic     string
	partition int32
}

// badPartition says why a partition a client names cannot exist (an empty
// or over-long topic name, a negative partition), or "". Kafka answers
// these UNKNOWN_TOPIC_OR_PARTITION, as a partition it does not have.
func badPartition(tp topicPartition) string {
	switch {
	case tp.topic == "":
		return "the topic name is empty"
	case len(tp.topic) > fsm.MaxTopicNameLen:
		return fmt.Sprintf("the topic name is longer than %d bytes", fsm.MaxTopicNameLen)
	case tp.partition < 0:
		return fmt.Sprintf("partition %d is negative", tp.partition)
	}
	return ""
}

// electResults builds an ElectLeaders answer, topic by topic in the order
// the topics first appear.
type electResults struct {
	resp  *kmsg.ElectLeadersResponse
	index map[string]int
}

func (e *electResults) add(topic string, partition int32, ke *kerr.Error, msg string) {
	i, ok := e.index[topic]
	if !ok {
		i = len(e.resp.Topics)
		e.index[topic] = i
		t := kmsg.NewElectLeadersResponseTopic()
		t.Topic = topic
		e.resp.Topics = append(e.resp.Topics, t)
	}
	p := kmsg.NewElectLeadersResponseTopicPartition()
	p.Partition = partition
	if ke != nil {
		p.ErrorCode = ke.Code
		p.ErrorMessage = &msg
	}
	e.resp.Topics[i].Partitions = append(e.resp.Topics[i].Partitions, p)
}

// electLeaders answers ElectLeaders as Kafka's controller does
// (ReplicationControlManager.electLeaders): the election is forwarded to
// the active controller, and each partition gets its own outcome. A null
// topic list elects every partition and leaves out those that need no
// election; a partition that cannot exist, or is named twice, is answered
// here and not forwarded.
func (s *Server) electLeaders(ctx context.Context, c *conn, r *kmsg.ElectLeadersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
	out := &electResults{resp: resp, index: map[string]int{}}
	// failAll answers every partition the request names with ke, and
	// from v1 the request itself, as Kafka's getErrorResponse does.
	failAll := func(ke *kerr.Error, msg string) kmsg.Response {
		if r.Version >= 1 {
			resp.ErrorCode = ke.Code
		}
		resp.Topics, out.index = nil, map[string]int{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out.add(t.Topic, p, ke, msg)
			}
		}
		return resp
	}
	typ := keelpb.ElectionType_ELECTION_TYPE_PREFERRED
	if r.Version >= 1 {
		switch r.ElectionType {
		case 0:
		case 1:
			typ = keelpb.ElectionType_ELECTION_TYPE_UNCLEAN
		default:
			return failAll(kerr.InvalidRequest, fmt.Sprintf("unknown election type %d: want 0 (preferred) or 1 (unclean)", r.ElectionType))
		}
	}
	if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterResourceName) {
		return failAll(kerr.ClusterAuthorizationFailed, "electing leaders needs ALTER on the cluster")
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	req := &keelpb.ElectLeadersRequest{Type: typ, All: r.Topics == nil, Principal: c.principal}
	if !req.All {
		named := map[topicPartition]int{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				named[topicPartition{t.Topic, p}]++
			}
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				tp := topicPartition{t.Topic, p}
				switch n := named[tp]; {
				case n > 1:
					out.add(t.Topic, p, kerr.InvalidRequest, "the partition is named more than once in the request")
					named[tp] = 0 // answered once
				case n == 0:
				case badPartition(tp) != "":
					out.add(t.Topic, p, kerr.UnknownTopicOrPartition, badPartition(tp))
				default:
					req.Partitions = append(req.Partitions, &keelpb.TopicPartition{Topic: t.Topic, Partition: p})
				}
			}
		}
		if len(req.Partitions) == 0 {
			return resp
		}
	}
	fail := func(ke *kerr.Error, msg string) kmsg.Response {
		if r.Version >= 1 {
			resp.ErrorCode = ke.Code
		}
		for _, tp := range req.Partitions {
			out.add(tp.Topic, tp.Partition, ke, msg)
		}
		return resp
	}
	if err := rpc.Validate(req); err != nil {
		return fail(electError(err))
	}
	elected, err := s.cfg.Controller.ElectLeaders(ctx, req)
	if err != nil {
		return fail(electError(err))
	}
	for _, res := range elected.GetResults() {
		if res.GetError() == "" {
			out.add(res.GetTopic(), res.GetPartition(), nil, "")
			continue
		}
		ke, ok := electionErrors[res.GetReason()]
		if !ok {
			ke = kerr.UnknownServerError
		}
		if req.All && ke == kerr.ElectionNotNeeded {
			continue
		}
		out.add(res.GetTopic(), res.GetPartition(), ke, res.GetError())
	}
	return resp
}
