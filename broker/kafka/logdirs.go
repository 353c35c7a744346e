package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterResource is the name of the one CLUSTER resource, as Kafka's ACLs
// name it.
const clusterResource = "kafka-cluster"

// describeLogDirs answers DescribeLogDirs (KIP-113) from this broker's own
// logs, as Kafka's ReplicaManager.describeLogDirs does: each log dir with
// its volume's total and usable bytes (v4), and the replicas asked for
// (all, for a null topic list), leaders and followers, each with its size
// and offset lag. Clients send it to every broker (kadm's
// DescribeAllLogDirs). It needs DESCRIBE on the cluster; a refusal is
// CLUSTER_AUTHORIZATION_FAILED from v3, and no dirs before.
func (s *Server) describeLogDirs(c *conn, r *kmsg.DescribeLogDirsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterResource) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	var asked map[tp]bool // nil: every replica
	if r.Topics != nil {
		asked = map[tp]bool{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				asked[tp{t.Topic, p}] = true
			}
		}
	}
	for _, d := range s.cfg.Backend.LogDirs() {
		rd := kmsg.NewDescribeLogDirsResponseDir()
		rd.Dir, rd.TotalBytes, rd.UsableBytes = d.Path, d.TotalBytes, d.UsableBytes
		// Replicas come sorted by topic and partition: one entry per topic.
		for _, rep := range d.Replicas {
			if asked != nil && !asked[tp{rep.Topic, rep.Partition}] {
				continue
			}
			if n := len(rd.Topics); n == 0 || rd.Topics[n-1].Topic != rep.Topic {
				t := kmsg.NewDescribeLogDirsResponseDirTopic()
				t.Topic = rep.Topic
				rd.Topics = append(rd.Topics, t)
			}
			p := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			p.Partition, p.Size, p.OffsetLag = rep.Partition, rep.Size, rep.OffsetLag
			t := &rd.Topics[len(rd.Topics)-1]
			t.Partitions = append(t.Partitions, p)
		}
		resp.Dirs = append(resp.Dirs, rd)
	}
	return resp
}
