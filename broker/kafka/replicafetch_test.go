package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestServer_ReplicaFetchRefused: a Kafka client fetching in a replica's
// name (replica id 0 or more) gets TOPIC_AUTHORIZATION_FAILED for every
// partition and no records, as Kafka answers a principal without
// CLUSTER_ACTION (KafkaApis.handleFetchRequest): Keel's brokers replicate
// over their gRPC port, so no Kafka client is a replica. A consumer's
// fetch (-1) and Kafka's debugging consumer (-2) read as consumers.
func TestServer_ReplicaFetchRefused(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1})
	producer := newClient(t, []string{s.Addr()}, kgo.DefaultProduceTopic("orders"))
	if err := producer.ProduceSync(context.Background(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, version := range []int16{4, 11, 12} {
		for _, tc := range []struct {
			replica int32
			want    int16
		}{{replica: 2, want: kerr.TopicAuthorizationFailed.Code}, {replica: 0, want: kerr.TopicAuthorizationFailed.Code},
			{replica: -1}, {replica: -2}} {
			t.Run(fmt.Sprintf("v%d replica %d", version, tc.replica), func(t *testing.T) {
				req := kmsg.NewPtrFetchRequest()
				req.Version, req.ReplicaID, req.MaxBytes = version, tc.replica, 1<<20
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = "orders"
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.PartitionMaxBytes = 1 << 20
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				resp := kmsg.NewPtrFetchResponse()
				rawRequest(t, s.Addr(), req, resp)
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
					t.Fatalf("answer: %+v; want one partition", resp.Topics)
				}
				p := resp.Topics[0].Partitions[0]
				if p.ErrorCode != tc.want {
					t.Fatalf("error %v; want %v", kerr.ErrorForCode(p.ErrorCode), kerr.ErrorForCode(tc.want))
				}
				if refused := tc.want != 0; refused == (len(p.RecordBatches) > 0) || p.RecordBatches == nil {
					t.Fatalf("%d bytes of records (nil: %t); want them only when not refused, and never null", len(p.RecordBatches), p.RecordBatches == nil)
				}
			})
		}
	}
}
