package integration

// Identities that are not who they say (issue 27, item 5), with real
// processes over mutual TLS: a certificate fetching as another broker's
// replica, and a broker's certificate doing an operator's writes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// kafkaTLS is the Kafka client option that presents cn's certificate
// from pki and checks the broker's.
func kafkaTLS(pki *testPKI, cn string) kgo.Opt {
	return kgo.DialTLSConfig(pki.config(cn).Client(tlsauth.RoleBroker))
}

// impersonator sends replica fetches for one partition to its leader's
// broker port with one certificate, in the name of one replica, as a
// follower would: each at the log end the last answer gave. It counts
// what the leader did with them.
type impersonator struct {
	cert    string
	replica int32
	cl      keelpb.BrokerServiceClient

	mu       sync.Mutex
	sent     int
	accepted int
	refused  int // PermissionDenied
	other    []string
}

// run fetches every 20 ms until ctx ends.
func (im *impersonator) run(ctx context.Context, topicID string, epoch int32) {
	offset := int64(0)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := im.cl.Fetch(fctx, &keelpb.FetchRequest{ReplicaId: im.replica, TopicId: topicID, LeaderEpoch: epoch,
			FetchOffset: offset, MaxBytes: 1})
		cancel()
		if ctx.Err() != nil {
			return
		}
		im.mu.Lock()
		im.sent++
		switch {
		case err == nil:
			im.accepted++
			offset = resp.GetLogEndOffset()
		case status.Code(err) == codes.PermissionDenied:
			im.refused++
		case len(im.other) < 5:
			im.other = append(im.other, err.Error())
		}
		im.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (im *impersonator) counts() (sent, accepted, refused int, other []string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.sent, im.accepted, im.refused, slices.Clone(im.other)
}

// TestIdentity_ImpersonatedReplicaFetchesRefused: three brokers with TLS
// Kafka listeners, an RF-3 topic with min.insync.replicas=2 and an
// idempotent acks=all producer. Both followers of its partition are
// paused (SIGSTOP); meanwhile an admin certificate fetches from the
// leader's broker port as each of them, and broker 3's certificate as
// broker 2, every 20 ms, as a follower would. Each fetch is refused
// (PermissionDenied); the followers leave the ISR, and no record is
// acknowledged while they are away. The leader is killed with kill -9
// while they are still paused; they resume, the leader restarts, and a
// consumer finds every acknowledged record at its offset.
//
// Before replica fetches were bound to the broker's own certificate, every
// admin fetch was served: the paused followers looked caught up, 3,264
// records were acknowledged while only the leader held them, then the
// followers' sessions expired and they left the ISR for the ELR (KIP-966),
// one was elected after the kill -9, and 3,200 acknowledged records were
// lost.
func TestIdentity_ImpersonatedReplicaFetchesRefused(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, threeBrokers, withTLS(pki))
	const topic = "impersonated"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	p0 := d.partition(t, 0)
	leader, epoch := p0.Leader, p0.LeaderEpoch
	followers := without(p0.Replicas, leader)

	prod := startProducer(t, kafka, topic, 1, "", kafkaTLS(pki, "admin"))
	prod.waitAcked(200, "before the followers are paused")

	// A broker that is no replica of the partition is refused by the
	// leader's image, whatever its certificate: broker 4 fetching as itself.
	dial := func(cn string) keelpb.BrokerServiceClient {
		t.Helper()
		cc, err := grpc.NewClient(c.BrokerAddr(leader), grpc.WithTransportCredentials(credentials.NewTLS(pki.config(cn).Client(tlsauth.RoleBroker))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return keelpb.NewBrokerServiceClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := dial("broker-4").Fetch(ctx, &keelpb.FetchRequest{ReplicaId: 4, TopicId: d.ID, LeaderEpoch: epoch})
	cancel()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "broker 4 is not a follower") {
		t.Errorf("broker 4, no replica, fetching as itself: %v; want FailedPrecondition (NOT_LEADER_OR_FOLLOWER)", err)
	}

	for _, f := range followers {
		c.PauseBroker(f)
	}
	pausedAt := prod.ackedCount()
	attackers := []*impersonator{
		{cert: "admin", replica: followers[0]}, {cert: "admin", replica: followers[1]},
		{cert: fmt.Sprintf("broker-%d", followers[1]), replica: followers[0]},
	}
	attackCtx, stopAttack := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, im := range attackers {
		im.cl = dial(im.cert)
		wg.Add(1)
		go func() {
			defer wg.Done()
			im.run(attackCtx, d.ID, epoch)
		}()
	}
	stopAttackers := func() {
		stopAttack()
		wg.Wait()
	}
	t.Cleanup(stopAttackers)

	// The followers fetch nothing: after the lag time (1 s) the leader
	// takes them out of the ISR, unless someone fetches in their names.
	var isr []int32
	err = poll.Wait(context.Background(), 20*time.Second, 50*time.Millisecond, "the paused followers to leave the ISR", func() (bool, error) {
		if d, err := c.DescribeTopicE(context.Background(), topic); err == nil {
			isr = d.partition(t, 0).ISR
		}
		return slices.Equal(isr, []int32{leader}), nil
	})
	if err != nil {
		t.Errorf("with brokers %v paused and their names impersonated: %v; the ISR is still %v", followers, err, isr)
	}
	// Then the impersonators go on for a second (50 fetches each): the
	// producer, retrying, gets nothing acknowledged meanwhile.
	shrunkAt := prod.ackedCount()
	poll.Until(t, 30*time.Second, "each impersonator to send 50 more fetches", func() bool {
		for _, im := range attackers {
			if sent, _, _, _ := im.counts(); sent < 50 {
				return false
			}
		}
		return true
	})
	whileAway := prod.ackedCount() - shrunkAt
	stopAttackers()
	for _, im := range attackers {
		sent, accepted, refused, other := im.counts()
		t.Logf("%s fetching as replica %d: %d fetches, %d served, %d refused (PermissionDenied), other errors %q", im.cert, im.replica, sent, accepted, refused, other)
		if accepted > 0 || refused != sent {
			t.Errorf("%s fetching as replica %d: %d of %d fetches served, %d refused; want every one refused with PermissionDenied", im.cert, im.replica, accepted, sent, refused)
		}
	}
	if whileAway > 0 {
		t.Errorf("%d records acknowledged with acks=all while brokers %v, the followers, were paused", whileAway, followers)
	}

	// The leader dies with the followers still paused: nothing it alone
	// holds was acknowledged, so nothing acknowledged is lost.
	c.KillBroker(leader)
	for _, f := range followers {
		c.ResumeBroker(f)
	}
	c.RestartBroker(leader)
	c.WaitForTopic(t, topic, "back to a full ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	prod.waitAcked(prod.ackedCount()+100, "with every broker back")
	if !prod.stop(kafkaTimeout) {
		t.Fatalf("the producer did not finish: records still in flight after %s", kafkaTimeout)
	}
	sent, acked, failed := prod.results()
	for v, err := range failed {
		t.Errorf("%q: the producer gave up: %v", v, err)
	}
	reader := kafkaClient(t, kafka, kafkaTLS(pki, "admin"))
	hw := highWatermarks(t, reader, topic, 1)
	read := consumeAll(t, kafka, topic, hw, kafkaTLS(pki, "admin"))
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, read, nil)
	t.Logf("%d records sent, %d acknowledged (%d before the pause, %d between the pause and the ISR shrinking, %d while the followers were away), %d failed; read up to %v: %d acknowledged found, %d acknowledged lost, %d never acknowledged",
		len(sent), len(acked), pausedAt, shrunkAt-pausedAt, whileAway, len(failed), hw, found, lost, unacked)
}

// TestIdentity_AdminWritesNeedAdminPrincipal: a broker's certificate
// calling the controllers' CreateTopic, CreatePartitions or DeleteTopic
// itself is refused (PermissionDenied), and so is one forwarding a
// principal that is not an admin's; the same writes sent by a Kafka admin
// client with an admin certificate to the broker's Kafka listener, which
// forwards them with the client's principal (KIP-590), succeed; with a
// broker's certificate they are refused with TOPIC_AUTHORIZATION_FAILED.
func TestIdentity_AdminWritesNeedAdminPrincipal(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, []int32{1}, withTLS(pki))
	c.createTopic(t, "standing", "--partitions", "1", "--replication-factor", "1")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	asBroker, err := rpc.NewClient(c.Addrs(), rpc.WithTLS(pki.config("broker-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer asBroker.Close()
	refused := func(what string, err error, want string) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("%s with broker-1's certificate: %v; want PermissionDenied containing %q", what, err, want)
		}
	}
	t.Run("a broker's certificate alone", func(t *testing.T) {
		_, err := asBroker.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "by-a-broker", Partitions: 1, ReplicationFactor: 1})
		refused("CreateTopic", err, "CreateTopic needs an admin certificate, or a broker forwarding an admin client's request in principal; the caller's is broker-1, which forwards none")
		_, err = asBroker.CreatePartitions(ctx, &keelpb.CreatePartitionsRequest{Topic: "standing", Count: 2})
		refused("CreatePartitions", err, "CreatePartitions needs an admin certificate, or a broker forwarding")
		refused("DeleteTopic", asBroker.DeleteTopic(ctx, "standing"), "DeleteTopic needs an admin certificate, or a broker forwarding")
		// Forwarding a principal that is not an admin's is no better.
		_, err = asBroker.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "by-a-broker", Partitions: 1, ReplicationFactor: 1, Principal: "broker-2"})
		refused("CreateTopic forwarded for broker-2", err, `CreateTopic needs an admin certificate; broker-1 forwards the request of "broker-2"`)
		d := c.cliDescribe(t, "standing")
		if len(d.Partitions) != 1 {
			t.Errorf("standing has %d partitions; want 1 (nothing changed)", len(d.Partitions))
		}
		if _, err := c.Client().DescribeTopic(ctx, "by-a-broker"); status.Code(err) != codes.NotFound {
			t.Errorf("DescribeTopic(by-a-broker) = %v; want NotFound", err)
		}
	})

	kafkaAdmin := func(cn string) *kgo.Client { return kafkaClient(t, kafka, kafkaTLS(pki, cn)) }
	createTopics := func(cl *kgo.Client, name string) error {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		req.Topics, req.TimeoutMillis = append(req.Topics, rt), 30_000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	createPartitions := func(cl *kgo.Client, name string, count int32) error {
		req := kmsg.NewPtrCreatePartitionsRequest()
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = name, count
		req.Topics, req.TimeoutMillis = append(req.Topics, rt), 30_000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	deleteTopics := func(cl *kgo.Client, name string) error {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TopicNames, req.TimeoutMillis = []string{name}, 30_000
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}

	t.Run("a Kafka client with a broker's certificate", func(t *testing.T) {
		cl := kafkaAdmin("broker-2")
		for what, err := range map[string]error{
			"CreateTopics":     createTopics(cl, "by-a-kafka-broker"),
			"CreatePartitions": createPartitions(cl, "standing", 2),
			"DeleteTopics":     deleteTopics(cl, "standing"),
		} {
			if !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Errorf("%s with broker-2's certificate: %v; want TOPIC_AUTHORIZATION_FAILED", what, err)
			}
		}
	})

	t.Run("a Kafka admin client, forwarded with its principal", func(t *testing.T) {
		cl := kafkaAdmin("admin-alice")
		if err := createTopics(cl, "by-an-admin"); err != nil {
			t.Fatalf("CreateTopics with admin-alice's certificate: %v", err)
		}
		if err := createPartitions(cl, "by-an-admin", 2); err != nil {
			t.Fatalf("CreatePartitions with admin-alice's certificate: %v", err)
		}
		if d := c.cliDescribe(t, "by-an-admin"); len(d.Partitions) != 2 {
			t.Fatalf("by-an-admin has %d partitions; want 2", len(d.Partitions))
		}
		if err := deleteTopics(cl, "standing"); err != nil {
			t.Fatalf("DeleteTopics with admin-alice's certificate: %v", err)
		}
		if _, err := c.Client().DescribeTopic(ctx, "standing"); status.Code(err) != codes.NotFound {
			t.Fatalf("DescribeTopic(standing) after its deletion = %v; want NotFound", err)
		}
	})
}
