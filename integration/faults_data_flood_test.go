package integration

// The data fault suite's connection flood (issue 27):
//
//   - flood-kafka: a partition leader's Kafka port is flooded with
//     connections that send nothing (strangers: a Kafka client sends its
//     first request at once), from loopback addresses other than the
//     clients' (127.0.0.2-127.0.0.5), each dialed again as the broker
//     closes it, for a few seconds, then all closed. The suite's brokers
//     run with Kafka connection bounds (dataKafkaBounds) that the flood
//     exceeds and the suite's clients do not. The broker must stay up (the
//     same process), the producer must go on being acknowledged on the
//     flooded partition during the flood, and the broker must have refused
//     the flood at both bounds it meets: a source's, and that on
//     unauthenticated connections (keel_listener_connections_refused_total).

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

const (
	// floodPerIP is the data suite's brokers' bound on the Kafka
	// connections from one address: several times what the suite's
	// clients hold from 127.0.0.1 (about ten franz-go clients, each with
	// up to three connections to a broker).
	floodPerIP = 100
	// floodMaxConns is their bound on all Kafka connections. A quarter of
	// it (200) is the bound on unauthenticated ones (connlimit.Plan):
	// twice a source's, so that the flood's first wave, from one address,
	// meets its source's bound, and its second, from three, fills the
	// unauthenticated bound before any of them meets its own. The flood
	// never holds more than that quarter, nor the clients more than
	// floodPerIP: the listener's own bound is never met.
	floodMaxConns = 8 * floodPerIP
	// floodAcks is how many acknowledgements of the flooded partition the
	// flood waits for, once at full strength, before it ends.
	floodAcks = 10
)

// dataKafkaBounds are the data suite's brokers' Kafka connection bounds
// (the derived ones, from this machine's open-files limit, are far above
// a few hundred connections).
var dataKafkaBounds = []string{
	fmt.Sprintf("--kafka-max-connections=%d", floodMaxConns),
	fmt.Sprintf("--kafka-max-connections-per-ip=%d", floodPerIP),
}

// floodSources are the flood's source addresses: Linux routes all of
// 127/8 to loopback, and the clients dial from 127.0.0.1.
var floodSources = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}

// floodTally counts what the floods did, for the report.
type floodTally struct {
	dialed, closedAtAccept int64 // as the flood saw them
	// The flooded brokers' refusals during the floods, by reason
	// (connlimit.ReasonSource, ...).
	refused map[string]float64
	acks    []int // each flood's acknowledgements of the flooded partition
	// acksBefore: the flooded partitions' acknowledgements in as long
	// just before each flood, to compare with.
	acksBefore int
	skipped    int
}

func (f *floodTally) add(o *floodTally) {
	f.dialed += o.dialed
	f.closedAtAccept += o.closedAtAccept
	for k, v := range o.refused {
		if f.refused == nil {
			f.refused = map[string]float64{}
		}
		f.refused[k] += v
	}
	f.acks = append(f.acks, o.acks...)
	f.acksBefore += o.acksBefore
	f.skipped += o.skipped
}

// write adds the floods' line to a tally's report, if any was tried.
func (f *floodTally) write(b *strings.Builder) {
	if len(f.acks)+f.skipped == 0 {
		return
	}
	total, fewest := 0, 0
	for _, n := range f.acks {
		total += n
	}
	if len(f.acks) > 0 {
		fewest = slices.Min(f.acks)
	}
	fmt.Fprintf(b, "\nKafka floods: %d (%d not injected); %d connections dialed from %s-%s, %d closed at once; the brokers refused %v over a source's bound, %v unauthenticated, %v over the listener's; the flooded partitions had %d records acknowledged during the floods (%d in as long before them), %d at fewest in one",
		len(f.acks), f.skipped, f.dialed, floodSources[0], floodSources[len(floodSources)-1], f.closedAtAccept,
		f.refused["source"], f.refused["unauthenticated"], f.refused["listener"], total, f.acksBefore, fewest)
}

// kafkaRefusals reads broker id's Kafka listener's refusals by reason, and
// its connections open, from its metrics.
func (r *dataRun) kafkaRefusals(id int32) (refused map[string]float64, open float64, err error) {
	s, err := scrapeMetrics(r.c.broker(id).MetricsAddr())
	if err != nil {
		return nil, 0, err
	}
	refused = map[string]float64{}
	for _, reason := range []string{"listener", "source", "unauthenticated"} {
		refused[reason] = s[fmt.Sprintf("keel_listener_connections_refused_total{listener=%q,reason=%q}", "kafka", reason)]
	}
	return refused, s[`keel_listener_connections{listener="kafka"}`], nil
}

// floodKafka floods the Kafka port of the leader of topic-part (or the
// broker leader names) for at least d, once the producer is acknowledged
// there, and judges what the broker did.
func (r *dataRun) floodKafka(t *testing.T, from time.Time, kind, topic string, part int32, leader func() (int32, string), d time.Duration, ft *floodTally) grayOutcome {
	t.Helper()
	id, how := leader()
	nd := r.c.broker(id)
	prod := r.prods[slices.Index(r.topics, topic)]
	// From a partition taking writes, so that writes that stop are the
	// flood's doing, not the last fault's.
	since := time.Now()
	if err := poll.Wait(t.Context(), healTimeout/4, 50*time.Millisecond, "", func() (bool, error) {
		return prod.ackedSince(since)[part] > 0, nil
	}); err != nil || !nd.Running() {
		ft.skipped++
		return r.skip(from, kind, fmt.Sprintf("%s-%d had no write acknowledged for %v, or %s %d was not running", topic, part, healTimeout/4, how, id))
	}
	pid := nd.Pid()
	var before map[string]float64
	poll.UntilState(t, 10*time.Second, fmt.Sprintf("broker %d's metrics", id), func() (bool, string) {
		var err error
		before, _, err = r.kafkaRefusals(id)
		return err == nil, fmt.Sprint(err)
	})

	// First wave: one address, twice its bound; the second: three more,
	// which fill the bound on unauthenticated connections.
	addr := r.kafka[id]
	start := time.Now()
	one := startFlood(t, addr, floodSources[:1], 2*floodPerIP)
	defer one.stop()
	waited := func(f *connFlood, what string) {
		t.Helper()
		if err := poll.Wait(t.Context(), 20*time.Second, 20*time.Millisecond, "", func() (bool, error) {
			return f.refused.Load() > 0, nil
		}); err != nil {
			t.Errorf("%s: %s %d's Kafka port closed none of %s at once within 20s (%d dialed)", kind, how, id, what, f.dialed.Load())
		}
	}
	waited(one, "the first wave's connections")
	rest := startFlood(t, addr, floodSources[1:], 3*floodPerIP)
	defer rest.stop()
	waited(rest, "the second wave's connections")

	full := time.Now()
	time.Sleep(d) // the fault's length, not synchronisation
	if err := poll.Wait(t.Context(), kafkaTimeout, 50*time.Millisecond, "", func() (bool, error) {
		return prod.ackedSince(full)[part] >= floodAcks, nil
	}); err != nil {
		t.Errorf("%s: %s-%d had %d records acknowledged in %v of the flood of %s %d; want %d at least",
			kind, topic, part, prod.ackedSince(full)[part], time.Since(full).Round(time.Millisecond), how, id, floodAcks)
	}
	acks := prod.ackedSince(full)[part]
	held := time.Since(full)
	// As many seconds of acknowledgements before the flood, to compare.
	acksBefore := prod.ackedSince(start.Add(-held))[part] - prod.ackedSince(start)[part]
	after, _, err := r.kafkaRefusals(id)
	one.stop()
	rest.stop()

	ft.acks = append(ft.acks, acks)
	ft.acksBefore += acksBefore
	ft.dialed += one.dialed.Load() + rest.dialed.Load()
	ft.closedAtAccept += one.refused.Load() + rest.refused.Load()
	if ft.refused == nil {
		ft.refused = map[string]float64{}
	}
	delta := map[string]float64{}
	if err != nil {
		t.Errorf("%s: %s %d's metrics after the flood: %v", kind, how, id, err)
	} else {
		for reason, n := range after {
			delta[reason] = n - before[reason]
			ft.refused[reason] += delta[reason]
		}
		if delta["source"] <= 0 || delta["unauthenticated"] <= 0 {
			t.Errorf("%s: %s %d refused %v connections over a source's bound and %v unauthenticated during the flood; want both above 0",
				kind, how, id, delta["source"], delta["unauthenticated"])
		}
	}
	if !nd.Running() || nd.Pid() != pid {
		t.Errorf("%s: %s %d did not survive the flood of its Kafka port (running: %v, pid %d, was %d)", kind, how, id, nd.Running(), nd.Pid(), pid)
		if !nd.Running() {
			r.restartBroker(id)
		}
	} else {
		// The flood's connections are closed with it.
		poll.UntilState(t, 20*time.Second, fmt.Sprintf("broker %d's Kafka connections back under %d once the flood ended", id, floodPerIP), func() (bool, string) {
			_, open, err := r.kafkaRefusals(id)
			return err == nil && open < floodPerIP, fmt.Sprintf("%v open (%v)", open, err)
		})
	}
	r.fault(from, "%s: %d then %d connections from %s to %s %d's Kafka port for %v (for %s-%d): %d dialed, %d closed at once; refused %v over a source's bound, %v unauthenticated, %v over the listener's; %d records acknowledged on %s-%d meanwhile (%d in as long before the flood)",
		kind, 2*floodPerIP, 3*floodPerIP, strings.Join(floodSources, ","), how, id, held.Round(time.Millisecond), topic, part,
		one.dialed.Load()+rest.dialed.Load(), one.refused.Load()+rest.refused.Load(),
		delta["source"], delta["unauthenticated"], delta["listener"], acks, topic, part, acksBefore)
	return grayInjected
}
