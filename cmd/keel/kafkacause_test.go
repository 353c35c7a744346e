package main

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{0, "0 records"}, {1, "1 record"}, {2, "2 records"}} {
		if got := count(tt.n, "record"); got != tt.want {
			t.Errorf("count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// TestTopicProblem: what the brokers' metadata of a topic says to a
// client that reads or writes it, in one line each.
func TestTopicProblem(t *testing.T) {
	led := func(p, leader int32, replicas, offline []int32) kmsg.MetadataResponseTopicPartition {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.Replicas, mp.OfflineReplicas = p, leader, replicas, offline
		if leader < 0 {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		return mp
	}
	topic := func(code int16, parts ...kmsg.MetadataResponseTopicPartition) kmsg.MetadataResponseTopic {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode, mt.Partitions = kmsg.StringPtr("events"), code, parts
		return mt
	}
	tests := []struct {
		name      string
		mt        kmsg.MetadataResponseTopic
		partition int32
		op        kafkaOp
		want      string
	}{
		{"served", topic(0, led(0, 1, []int32{1}, nil)), -1, opRead, ""},
		{"a partition served", topic(0, led(0, 1, []int32{1}, nil)), 0, opRead, ""},
		{"unknown topic", topic(kerr.UnknownTopicOrPartition.Code), -1, opRead,
			"topic events does not exist (create it: keel topic create events --partitions N --replication-factor N)"},
		{"not authorized to read", topic(kerr.TopicAuthorizationFailed.Code), -1, opRead,
			"not authorized to read topic events (TOPIC_AUTHORIZATION_FAILED): give an admin certificate with --tls-*, or allow this client's principal: keel acl add --principal User:NAME --allow --operation READ --topic events"},
		{"not authorized to write", topic(kerr.TopicAuthorizationFailed.Code), -1, opWrite, "--operation WRITE --topic events"},
		{"no such partition", topic(0, led(0, 1, []int32{1}, nil), led(1, 1, []int32{1}, nil)), 2, opRead,
			"topic events has 2 partitions (0 to 1), no partition 2"},
		// Not for good: a leader is elected in moments, and a consumer
		// that gets nothing in its timeout says why then.
		{"no leader yet", topic(0, led(0, -1, []int32{1}, nil)), 0, opRead, ""},
		{"another error", topic(kerr.InvalidTopicException.Code), -1, opRead, "topic events: INVALID_TOPIC_EXCEPTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := topicProblem(tt.mt, "events", tt.partition, tt.op)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("topicProblem = %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("topicProblem = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestPartitionProblem: a partition without a leader names its offline
// replicas, and where to look.
func TestPartitionProblem(t *testing.T) {
	mp := kmsg.NewMetadataResponseTopicPartition()
	mp.Partition, mp.Leader, mp.ErrorCode = 2, -1, kerr.LeaderNotAvailable.Code
	mp.Replicas, mp.OfflineReplicas = []int32{1, 2, 3}, []int32{1, 3}
	err := partitionProblem("events", mp)
	if want := "partition 2 of topic events has no leader: brokers 1,3 are offline (replicas 1,2,3); keel partition describe events shows why"; err == nil || err.Error() != want {
		t.Fatalf("partitionProblem = %v, want %q", err, want)
	}
	mp.OfflineReplicas = nil
	if err := partitionProblem("events", mp); err == nil || !strings.Contains(err.Error(), "has no leader: no replica is in sync and alive") {
		t.Fatalf("partitionProblem with every replica live = %v", err)
	}
	mp.Leader, mp.ErrorCode = 2, 0
	if err := partitionProblem("events", mp); err != nil {
		t.Fatalf("a led partition: %v", err)
	}
}
