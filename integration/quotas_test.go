package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// Client quotas (KIP-13, KIP-124, KIP-546) through the Kafka API with real
// processes: set and described through franz-go's kadm, enforced by every
// broker with throttle_time_ms.

func quotaEntity(parts ...string) kadm.ClientQuotaEntity {
	var e kadm.ClientQuotaEntity
	for i := 0; i < len(parts); i += 2 {
		c := kadm.ClientQuotaEntityComponent{Type: parts[i]}
		if parts[i+1] != "<default>" {
			c.Name = kmsg.StringPtr(parts[i+1])
		}
		e = append(e, c)
	}
	return e
}

// alterQuotas applies entries through kadm and returns each entity's error.
func alterQuotas(t *testing.T, adm *kadm.Client, entries ...kadm.AlterClientQuotaEntry) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	res, err := adm.AlterClientQuotas(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]error, len(res))
	for i, r := range res {
		out[i] = r.Err
		if r.Err != nil && r.ErrMessage != "" {
			out[i] = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
		}
	}
	return out
}

// describedQuotas renders a describe's answer as "{entity} key=value ..."
// lines, one per entity, sorted.
func describedQuotas(t *testing.T, adm *kadm.Client, strict bool, comps ...kadm.DescribeClientQuotaComponent) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	got, err := adm.DescribeClientQuotas(ctx, strict, comps)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range got {
		line := q.Entity.String()
		for _, v := range q.Values {
			line += fmt.Sprintf(" %s=%g", v.Key, v.Value)
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// TestClientQuotas_AlterAndDescribe: what AlterClientQuotas sets,
// DescribeClientQuotas returns, by exact, default and any filters, from
// every broker; bad entries are refused with INVALID_REQUEST and nothing
// of theirs is written.
func TestClientQuotas_AlterAndDescribe(t *testing.T) {
	t.Parallel()
	_, kafka := startKafkaCluster(t, threeBrokers)
	adm := kafkaAdmin(t, kafka)

	errs := alterQuotas(t, adm,
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", "app"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 102400}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("user", "<default>"), Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 2048000}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("user", "alice", "client-id", "<default>"), Ops: []kadm.AlterClientQuotaOp{
			{Key: "request_percentage", Value: 50}, {Key: "producer_byte_rate", Value: 4096}}},
	)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}

	// Bad input: each entry is refused alone, with a message, and none of
	// it is written (the good entry beside them is).
	errs = alterQuotas(t, adm,
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", "bad1"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_bytes_rate", Value: 1}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("user", "bad2", "user", "bad3"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", "bad4"), Ops: []kadm.AlterClientQuotaOp{
			{Key: "consumer_byte_rate", Value: 1000}, {Key: "producer_byte_rate", Value: -1}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("group", "bad5"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", "bad6"), Ops: []kadm.AlterClientQuotaOp{{Key: "controller_mutation_rate", Value: 1}}},
		kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", "good"), Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 1}}},
	)
	for i, err := range errs[:5] {
		if !errors.Is(err, kerr.InvalidRequest) {
			t.Errorf("bad entry %d: %v; want INVALID_REQUEST", i, err)
		}
	}
	if errs[5] != nil {
		t.Errorf("the good entry beside bad ones: %v", errs[5])
	}

	all := []string{
		"{user=<default>} consumer_byte_rate=2.048e+06",
		"{user=alice, client-id=<default>} producer_byte_rate=4096 request_percentage=50",
		"{client-id=app} producer_byte_rate=102400",
		"{client-id=good} consumer_byte_rate=1",
	}
	any := func(typ string) kadm.DescribeClientQuotaComponent {
		return kadm.DescribeClientQuotaComponent{Type: typ, MatchType: kmsg.QuotasMatchTypeAny}
	}
	for _, tt := range []struct {
		name   string
		strict bool
		comps  []kadm.DescribeClientQuotaComponent
		want   []string
	}{
		{name: "no filter", want: all},
		{name: "exact client id", comps: []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: kmsg.QuotasMatchTypeExact, MatchName: kmsg.StringPtr("app")}},
			want: all[2:3]},
		{name: "default user", comps: []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: kmsg.QuotasMatchTypeDefault}}, want: all[:1]},
		{name: "any user", comps: []kadm.DescribeClientQuotaComponent{any("user")}, want: all[:2]},
		{name: "any user, strict", strict: true, comps: []kadm.DescribeClientQuotaComponent{any("user")}, want: all[:1]},
		{name: "any client id", comps: []kadm.DescribeClientQuotaComponent{any("client-id")}, want: all[1:]},
		{name: "exact user, default client id", comps: []kadm.DescribeClientQuotaComponent{
			{Type: "user", MatchType: kmsg.QuotasMatchTypeExact, MatchName: kmsg.StringPtr("alice")},
			{Type: "client-id", MatchType: kmsg.QuotasMatchTypeDefault}}, want: all[1:2]},
	} {
		got := describedQuotas(t, adm, tt.strict, tt.comps...)
		if want := slices.Sorted(slices.Values(tt.want)); !slices.Equal(got, want) {
			t.Errorf("%s: described\n%q\nwant\n%q", tt.name, got, want)
		}
	}

	// Every broker answers from its own image: each has it all.
	cl := kafkaClient(t, kafka)
	for id := range kafka {
		poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d describes every quota", id), func() (bool, string) {
			resp, err := cl.Broker(int(id)).Request(context.Background(), kmsg.NewPtrDescribeClientQuotasRequest())
			if err != nil {
				return false, err.Error()
			}
			n := len(resp.(*kmsg.DescribeClientQuotasResponse).Entries)
			return n == len(all), fmt.Sprintf("%d entities", n)
		})
	}

	// Removing every key of an entity removes the entity.
	if errs := alterQuotas(t, adm, kadm.AlterClientQuotaEntry{Entity: quotaEntity("user", "alice", "client-id", "<default>"), Ops: []kadm.AlterClientQuotaOp{
		{Key: "request_percentage", Remove: true}, {Key: "producer_byte_rate", Remove: true}}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The broker that answered waited for its own image; the describe may
	// go to another, which gets there soon after.
	poll.UntilState(t, kafkaTimeout, "the entity gone from the describe", func() (bool, string) {
		got := describedQuotas(t, adm, false, any("user"))
		return fmt.Sprint(got) == fmt.Sprint(all[:1]), fmt.Sprintf("%q", got)
	})
}

// throttleCounter counts the throttles a client's brokers gave it, by
// broker.
type throttleCounter struct {
	mu sync.Mutex
	by map[int32]int
}

func (c *throttleCounter) OnBrokerThrottle(meta kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[int32]int{}
	}
	c.by[meta.NodeID]++
}

func (c *throttleCounter) brokers() map[int32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int32]int{}
	for k, v := range c.by {
		out[k] = v
	}
	return out
}

// Quotas of the throttle test: low, and a run long enough to show them,
// yet a small part of what the client moves unthrottled on loopback.
const (
	quotaRate       = 50 << 10 // bytes per second, per broker
	quotaRunSeconds = 6
	quotaRun        = quotaRunSeconds * time.Second
	// quotaAllowed is the most a client may move through one broker in a
	// run, as Kafka's windows measure it: a new client's rate is taken
	// over at least ten one-second windows, so it may send ten seconds of
	// quota at once, then the quota; 25% margin, and a request in flight.
	quotaAllowed = quotaRate*(10+quotaRunSeconds)*5/4 + 64<<10
)

// TestClientQuotas_ThrottleProduceAndFetch: a producer and a consumer
// over their client id's byte rate are held near it by every broker, and
// their answers carry throttle_time_ms; removing the quotas lifts them.
func TestClientQuotas_ThrottleProduceAndFetch(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "throttled"
	// One partition led by each broker.
	c.createTopic(t, topic, "--assignment", "0:1;1:2;2:3")
	c.WaitForTopic(t, topic, "every partition led", func(d topicJSON) bool {
		for _, p := range d.Partitions {
			if p.Leader <= 0 {
				return false
			}
		}
		return len(d.Partitions) == 3
	})
	adm := kafkaAdmin(t, kafka)
	set := func(client, key string, remove bool) {
		t.Helper()
		errs := alterQuotas(t, adm, kadm.AlterClientQuotaEntry{Entity: quotaEntity("client-id", client),
			Ops: []kadm.AlterClientQuotaOp{{Key: key, Value: quotaRate, Remove: remove}}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		// Every broker applies it from its image: wait until each
		// describes it (or not).
		cl := kafkaClient(t, kafka)
		for id := range kafka {
			poll.Until(t, kafkaTimeout, fmt.Sprintf("broker %d has the %s quota of %s (removed: %v)", id, key, client, remove), func() bool {
				req := kmsg.NewPtrDescribeClientQuotasRequest()
				req.Components = []kmsg.DescribeClientQuotasRequestComponent{{EntityType: "client-id", MatchType: kmsg.QuotasMatchTypeExact, Match: kmsg.StringPtr(client)}}
				resp, err := cl.Broker(int(id)).Request(context.Background(), req)
				if err != nil {
					return false
				}
				found := false
				for _, e := range resp.(*kmsg.DescribeClientQuotasResponse).Entries {
					for _, v := range e.Values {
						found = found || v.Key == key
					}
				}
				return found != remove
			})
		}
	}

	// Producer: as fast as it can, for quotaRun.
	set("slow-producer", "producer_byte_rate", false)
	var throttles throttleCounter
	// Bytes that do not compress, sent as they are: a quota counts the
	// bytes on the wire.
	value := make([]byte, 1000)
	rand.Read(value)
	producer := kafkaClient(t, kafka, kgo.ClientID("slow-producer"), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(16<<10), kgo.MaxBufferedRecords(200), kgo.WithHooks(&throttles))
	produce := func(run time.Duration, stopAt int64) (acked int64, took time.Duration) {
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), run)
		defer cancel()
		start := time.Now()
		var wg sync.WaitGroup
		for ctx.Err() == nil && (stopAt == 0 || n.Load() < stopAt) {
			wg.Add(1)
			producer.Produce(ctx, &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
				defer wg.Done()
				if err == nil {
					n.Add(int64(len(r.Value)))
				}
			})
		}
		took = time.Since(start)
		cancel()
		wg.Wait()
		return n.Load(), took
	}
	acked, _ := produce(quotaRun, 0)
	checkHeld(t, "producer", acked, &throttles, kafka)
	// Lifted: the quota's whole allowance again, several times over, in
	// less time than the quota would take for it.
	set("slow-producer", "producer_byte_rate", true)
	checkLifted(t, "producer", int64(6*quotaAllowed), produce)

	// Consumer: reads what is there as fast as it can, for quotaRun.
	set("slow-consumer", "consumer_byte_rate", false)
	var cthrottles throttleCounter
	consumer := kafkaClient(t, kafka, kgo.ClientID("slow-consumer"), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<10), kgo.FetchMaxPartitionBytes(64<<10), kgo.WithHooks(&cthrottles))
	consume := func(run time.Duration, stopAt int64) (read int64, took time.Duration) {
		start := time.Now()
		for time.Since(start) < run && (stopAt == 0 || read < stopAt) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { read += int64(len(r.Value)) })
			cancel()
		}
		return read, time.Since(start)
	}
	read, _ := consume(quotaRun, 0)
	checkHeld(t, "consumer", read, &cthrottles, kafka)
	set("slow-consumer", "consumer_byte_rate", true)
	// What is left of the topic: a third of the producer's lifted run.
	checkLifted(t, "consumer", int64(3*quotaAllowed), consume)
}

// checkHeld checks that a client moved near its quota through each of the
// three brokers in quotaRun, and that each answered it with
// throttle_time_ms.
func checkHeld(t *testing.T, who string, moved int64, throttles *throttleCounter, kafka map[int32]string) {
	t.Helper()
	lo, hi := int64(3*quotaRate*quotaRunSeconds/2), int64(3*quotaAllowed)
	t.Logf("the %s moved %d bytes in %v at %d B/s a broker (allowed %d..%d); throttled by brokers %v", who, moved, quotaRun, quotaRate, lo, hi, throttles.brokers())
	if moved > hi || moved < lo {
		t.Errorf("the %s moved %d bytes in %v; want near the quota: %d..%d", who, moved, quotaRun, lo, hi)
	}
	for id := range kafka {
		if throttles.brokers()[id] == 0 {
			t.Errorf("broker %d never answered the %s with throttle_time_ms", id, who)
		}
	}
}

// checkLifted checks that, its quota removed, a client moves want bytes
// in well under the time the quota would allow them (run: move until want
// or the limit).
func checkLifted(t *testing.T, who string, want int64, run func(limit time.Duration, want int64) (int64, time.Duration)) {
	t.Helper()
	atQuota := time.Duration(want/(3*quotaRate)) * time.Second
	if got, took := run(kafkaTimeout, want); got < want || took > 3*atQuota/4 {
		t.Errorf("after the quota's removal the %s moved %d bytes in %v; want %d well within %v", who, got, took, want, atQuota)
	}
}
