package main

// Why a Kafka command failed. franz-go retries what may pass (nothing
// listening yet, a topic not created yet, a partition without a leader)
// until its timeout, and then says little: `keel produce` and `keel
// consume` ask the brokers themselves, and fail in one line naming the
// cause, with the fix where there is one.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
)

// dialTimeout bounds one dial of a --bootstrap address.
const dialTimeout = 3 * time.Second

// listening returns nil once one of seeds accepts a TCP connection, and
// otherwise names every address and why the last one failed: a client of
// nothing would retry until its timeout and then say only that.
func listening(ctx context.Context, seeds []string) error {
	var d net.Dialer
	var last error
	for _, addr := range seeds {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			conn.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("nothing is listening at %s (--bootstrap): %s; give --bootstrap the brokers' Kafka listeners "+
		"(keel broker list shows them), or start the brokers with --kafka-listen", strings.Join(seeds, ", "), dialFailure(last))
}

// dialFailure says in a few words why a dial failed.
func dialFailure(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer in %s", dialTimeout)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// describeTopic asks the brokers for topic's metadata, never creating it.
func describeTopic(ctx context.Context, cl *kgo.Client, topic string) (kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.MetadataResponseTopic{}, fmt.Errorf("ask the brokers about topic %s: %w%s", topic, err, closedHint(err))
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == topic {
			return t, nil
		}
	}
	return kmsg.MetadataResponseTopic{}, fmt.Errorf("the brokers' metadata does not mention topic %s", topic)
}

// closedHint explains a broker closing the connection on a request, as
// " (hint)", or "": a listener that requires SASL closes it on anything
// before a login, which the CLI does not make.
func closedHint(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return " (keel produce and consume make no SASL login: a listener with --kafka-sasl required serves them nothing)"
	}
	return ""
}

// kafkaOp is what a command does to a topic, for the words and the ACL an
// authorization failure names.
type kafkaOp struct {
	verb string // "read", "write to"
	acl  string // the ACL operation it needs: READ, WRITE
}

var (
	opRead  = kafkaOp{verb: "read", acl: "READ"}
	opWrite = kafkaOp{verb: "write to", acl: "WRITE"}
)

// errUnknownTopic is the answer for a topic that does not exist.
func errUnknownTopic(topic string) error {
	return fmt.Errorf("topic %s does not exist (create it: keel topic create %s --partitions N --replication-factor N)", topic, topic)
}

// errNotCreated is the answer for a producer's topic that does not exist
// and that the brokers did not create on first use.
func errNotCreated(topic string) error {
	return fmt.Errorf("topic %s does not exist, and the cluster does not create topics on first use "+
		"(auto.create.topics.enable is false, or metadata.version is below %d): create it with keel topic create %s "+
		"--partitions N --replication-factor N, or turn it on: keel config alter --config %s=true",
		topic, fsm.AutoCreateMetadataVersion, topic, fsm.AutoCreateTopicsEnable)
}

// errNotAuthorized is the answer for a client the brokers refuse op on
// topic. Plaintext clients and admin certificates are super users: a
// refusal means an application's identity, or a listener that wants a
// SASL login, which the CLI does not make.
func errNotAuthorized(topic string, op kafkaOp) error {
	return fmt.Errorf("not authorized to %s topic %s (TOPIC_AUTHORIZATION_FAILED): give an admin certificate with --tls-*, "+
		"or allow this client's principal: keel acl add --principal User:NAME --allow --operation %s --topic %s",
		op.verb, topic, op.acl, topic)
}

// topicProblem is what, in the brokers' metadata mt of topic, stops a
// client that does op on partition (-1: every partition) for good, or
// nil. A partition without a leader is not: one is elected in moments.
func topicProblem(mt kmsg.MetadataResponseTopic, topic string, partition int32, op kafkaOp) error {
	switch err := kerr.ErrorForCode(mt.ErrorCode); {
	case err == nil:
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return errUnknownTopic(topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return errNotAuthorized(topic, op)
	default:
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	if partition < 0 {
		return nil
	}
	for _, p := range mt.Partitions {
		if p.Partition == partition {
			return nil
		}
	}
	return fmt.Errorf("topic %s has %s (0 to %d), no partition %d", topic, count(len(mt.Partitions), "partition"), len(mt.Partitions)-1, partition)
}

// partitionProblem says why partition p of topic cannot be read or
// written, or nil when it has a live leader.
func partitionProblem(topic string, p kmsg.MetadataResponseTopicPartition) error {
	if p.Leader >= 0 && !errors.Is(kerr.ErrorForCode(p.ErrorCode), kerr.LeaderNotAvailable) {
		return nil
	}
	why := "no replica is in sync and alive"
	switch off := p.OfflineReplicas; len(off) {
	case 0:
	case 1:
		why = fmt.Sprintf("broker %d is offline (replicas %s)", off[0], joinIDs(p.Replicas))
	default:
		why = fmt.Sprintf("brokers %s are offline (replicas %s)", joinIDs(off), joinIDs(p.Replicas))
	}
	return fmt.Errorf("partition %d of topic %s has no leader: %s; keel partition describe %s shows why", p.Partition, topic, why, topic)
}

// count is n and noun, in agreement: "1 record", "2 records".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// kafkaCause is why a Kafka client's request on topic (partition; -1:
// any) failed with err, in one line: Kafka's error as the operator acts on
// it, or, for franz-go's own (a record timeout, brokers it could not
// reach), what the brokers say about the topic now.
func kafkaCause(ctx context.Context, cl *kgo.Client, seeds []string, topic string, partition int32, op kafkaOp, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		if op == opWrite {
			return errNotCreated(topic)
		}
		return errUnknownTopic(topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return errNotAuthorized(topic, op)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("not authorized (CLUSTER_AUTHORIZATION_FAILED): an idempotent producer needs IDEMPOTENT_WRITE on the cluster "+
			"or WRITE on topic %s; give an admin certificate with --tls-*, or --acks 1 (no idempotence)", topic)
	case errors.Is(err, kerr.NotEnoughReplicas), errors.Is(err, kerr.NotEnoughReplicasAfterAppend):
		return fmt.Errorf("%w: fewer replicas of topic %s are in sync than its min.insync.replicas (keel partition describe %s); "+
			"--acks 1 needs only the leader", err, topic, topic)
	case errors.Is(err, kerr.MessageTooLarge):
		return fmt.Errorf("%w: the record is larger than topic %s's max.message.bytes (keel topic describe %s)", err, topic, topic)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	if lerr := listening(ctx, seeds); lerr != nil {
		return lerr
	}
	mt, derr := describeTopic(ctx, cl, topic)
	if derr != nil {
		return derr
	}
	if perr := topicProblem(mt, topic, -1, op); perr != nil {
		return perr
	}
	var leaderless []string
	for _, p := range mt.Partitions {
		if partition >= 0 && p.Partition != partition {
			continue
		}
		if perr := partitionProblem(topic, p); perr != nil {
			leaderless = append(leaderless, perr.Error())
		}
	}
	if len(leaderless) > 0 {
		return errors.New(strings.Join(leaderless, "; "))
	}
	return err
}

// notConsumed says, after a consumer got fewer records than it waited
// for, what the topic holds: how many partitions, and how many records
// lie past where the consumer started, as the brokers' offsets tell.
func notConsumed(ctx context.Context, cl *kgo.Client, topic string, partition int32, fromBeginning bool) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return ""
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return ""
	}
	var held int64
	var parts []int32
	ends.Each(func(end kadm.ListedOffset) {
		if partition >= 0 && end.Partition != partition || end.Err != nil {
			return
		}
		parts = append(parts, end.Partition)
		if start, ok := starts.Lookup(topic, end.Partition); ok && start.Err == nil {
			held += end.Offset - start.Offset
		}
	})
	slices.Sort(parts)
	where := fmt.Sprintf("topic %s has %s", topic, count(len(ends[topic]), "partition"))
	if partition >= 0 {
		where = fmt.Sprintf("partition %d of topic %s", partition, topic)
	}
	switch {
	case len(parts) == 0:
		return ""
	case held == 0:
		return where + ", holding no records: nothing has been produced since its start offsets"
	case !fromBeginning:
		return fmt.Sprintf("%s, holding %s, all before the end where the consumer started: --from-beginning reads them", where, count(int(held), "record"))
	}
	return fmt.Sprintf("%s, holding %s", where, count(int(held), "record"))
}

// writable fails, naming the cause, when nothing listens at seeds or the
// brokers do not answer Metadata, and otherwise says whether --topic
// exists, so that a topic created on first use is told.
func (k *kafkaFlags) writable(ctx context.Context, cl *kgo.Client, seeds []string) (exists bool, err error) {
	if err := listening(ctx, seeds); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	mt, err := describeTopic(ctx, cl, k.topic)
	if err != nil {
		return false, err
	}
	return !errors.Is(kerr.ErrorForCode(mt.ErrorCode), kerr.UnknownTopicOrPartition), nil
}

// readable fails, naming the cause, when --topic (and partition, unless
// -1) cannot be read: nothing listens at seeds, the topic or partition
// does not exist, or the client may not read it. A consumer would wait
// for them until its timeout, and then say only that it got nothing.
func (k *kafkaFlags) readable(ctx context.Context, cl *kgo.Client, seeds []string, partition int32) error {
	if err := listening(ctx, seeds); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	mt, err := describeTopic(ctx, cl, k.topic)
	if err != nil {
		return err
	}
	return topicProblem(mt, k.topic, partition, opRead)
}

// shortfall is consume's failure when it got n of the limit records it
// waited --timeout for: what it was waiting on, a partition without a
// leader, or what the topic holds.
func (k *kafkaFlags) shortfall(ctx context.Context, cl *kgo.Client, seeds []string, partition int32, fromBeginning bool, n, limit int) error {
	head := fmt.Sprintf("%d of %s in %s (--timeout)", n, count(limit, "record"), k.timeout)
	if err := kafkaCause(ctx, cl, seeds, k.topic, partition, opRead, context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", head, err)
	}
	if held := notConsumed(ctx, cl, k.topic, partition, fromBeginning); held != "" {
		return fmt.Errorf("%s: %s", head, held)
	}
	return errors.New(head)
}
