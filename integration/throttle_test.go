package integration

import (
	"context"
	"crypto/rand"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// throttleRates reads the cluster's replication throttles with `keel
// config describe`: bytes/s, math.MaxInt64 for none.
func (c *Cluster) throttleRates(t testing.TB) (leader, follower int64) {
	t.Helper()
	var rows []configJSON
	c.keelJSON(t, &rows, "config", "describe")
	leader, follower = math.MaxInt64, math.MaxInt64
	for _, r := range rows {
		n, err := strconv.ParseInt(r.Value, 10, 64)
		switch {
		case err != nil:
		case r.Name == "leader.replication.throttled.rate":
			leader = n
		case r.Name == "follower.replication.throttled.rate":
			follower = n
		}
	}
	return leader, follower
}

// TestReassign_ThrottleCapsTheMove: partition 0 of "moving", on brokers 1
// and 2, holds 20 MB; `keel partition reassign --replicas 1,2,3 --throttle
// 2MB` adds broker 3. At 2 MB/s the 20 MB take about ten seconds: the move
// must not complete in under five (without the throttle it takes about
// one on loopback). Meanwhile `keel partition reassignments` shows the
// throttle, and acks=all writes to "steady", which broker 3 follows too,
// are acknowledged promptly: only the replica being added is throttled.
// Once the move completes, both throttle configs are gone, deleted by the
// batch that completed it; Kafka's AlterBrokerConfigs sets them too.
func TestReassign_ThrottleCapsTheMove(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3}
	c, kafka := startKafkaCluster(t, brokers)
	c.createTopic(t, "moving", "--assignment", "0:1,2")
	c.createTopic(t, "steady", "--assignment", "0:1,2,3")
	c.WaitForAgreement(t, "moving", brokers)
	c.WaitForAgreement(t, "steady", brokers)

	const (
		recordBytes = 100_000
		records     = 200 // 20 MB
		rate        = 2_000_000
	)
	// Uncompressed, and random: the bytes on disk are the bytes moved.
	cl := kafkaClient(t, kafka, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	batch := make([]*kgo.Record, 0, 10)
	for i := range records {
		value := make([]byte, recordBytes)
		_, _ = rand.Read(value)
		batch = append(batch, &kgo.Record{Topic: "moving", Partition: 0, Value: value})
		if len(batch) == cap(batch) || i == records-1 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				t.Fatalf("producing 20 MB to moving/0: %v", err)
			}
			batch = batch[:0]
		}
	}

	start := time.Now()
	var r reassignJSON
	c.keelJSON(t, &r, "partition", "reassign", "--topic", "moving", "--partition", "0", "--replicas", "1,2,3", "--throttle", "2MB")
	if !slices.Equal(r.AddingReplicas, []int32{3}) {
		t.Fatalf("keel partition reassign: %s; want broker 3 being added", r.partitionJSON)
	}
	if l, f := c.throttleRates(t); l != rate || f != rate {
		t.Fatalf("throttle during the move: leader %d, follower %d; want %d each", l, f, rate)
	}
	var ongoing []struct {
		reassignmentJSON
		Leader   *int64 `json:"leader_replication_throttled_rate"`
		Follower *int64 `json:"follower_replication_throttled_rate"`
	}
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if len(ongoing) != 1 || ongoing[0].Leader == nil || *ongoing[0].Leader != rate || ongoing[0].Follower == nil || *ongoing[0].Follower != rate {
		t.Fatalf("keel partition reassignments during the move: %+v; want moving/0 with both rates at %d", ongoing, rate)
	}

	// acks=all to a partition broker 3 already holds in sync is not
	// slowed by the move's throttle.
	for i := range 5 {
		sent := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "steady", Partition: 0, Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("acks=all to steady during the move: %v", err)
		}
		if took := time.Since(sent); took > 5*time.Second {
			t.Fatalf("acks=all to steady during the move took %v; want it prompt, unthrottled", took)
		}
	}

	moved := c.WaitForTopic(t, "moving", "moved to [1 2 3]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return slices.Equal(p.Replicas, []int32{1, 2, 3}) && len(p.AddingReplicas) == 0 && sameSet(p.ISR, brokers)
	})
	took := time.Since(start)
	if took < 5*time.Second {
		t.Fatalf("the 20 MB move at 2 MB/s completed in %v: %s; want at least 5 s", took, moved.partition(t, 0))
	}
	t.Logf("the 20 MB move at 2 MB/s took %v", took)
	poll.UntilState(t, 30*time.Second, "the throttle lifted", func() (bool, string) {
		l, f := c.throttleRates(t)
		return l == math.MaxInt64 && f == math.MaxInt64, "leader " + strconv.FormatInt(l, 10) + ", follower " + strconv.FormatInt(f, 10)
	})

	// Kafka's tools set the same configs as the brokers' dynamic defaults
	// (kafka-configs --entity-type brokers --entity-default).
	adm := kadm.NewClient(cl)
	if _, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "follower.replication.throttled.rate", Value: kmsg.StringPtr("3000000")}}); err != nil {
		t.Fatalf("AlterBrokerConfigs follower.replication.throttled.rate: %v", err)
	}
	if _, f := c.throttleRates(t); f != 3_000_000 {
		t.Fatalf("after Kafka's AlterBrokerConfigs: follower rate %d, want 3000000", f)
	}
}
