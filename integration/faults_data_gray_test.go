package integration

// The data fault suite's gray failures (issue 26): faults between "up" and
// "down" that each broke a guarantee before, injected by the data nemesis
// (faults_data_test.go) among its kills and pauses.
//
//   - power-loss-broker: a broker loses power (keelproc's PowerLoss: kill
//     -9, then each of its replica logs cut back to its last fsync) and
//     starts again.
//   - power-loss-last-isr-member: a partition's ISR is brought down to its
//     leader, with one follower in the ELR holding every acknowledged record
//     (the other follower stopped cleanly, then the first paused past its
//     session), and the leader loses power and starts again: it must leave
//     the ISR even as its last member (KIP-966), and the partition waits
//     for the ELR member, which leads once it resumes.
//   - restore-snapshot: the metadata snapshot saved before the faults is
//     restored into the running cluster (keel snapshot restore) while the
//     producers write: every partition must lead again, at epochs above
//     those before, and take writes within restoreRecoveryLimit.
//   - blip-broker-links: a broker's links to the controllers refuse and
//     reset for 50-450 ms (shorter than the crash grace), or sometimes 1-2 s
//     (longer; the broker's port listens throughout): never a crash fence.
//
// The final read then checks every acknowledged record, as for every fault.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
)

const (
	// dataCrashGrace is the data suite's --crash-grace: the controllers'
	// default.
	dataCrashGrace = 500 * time.Millisecond
	// blipNoFenceWithin: links down for at most this long must not fence
	// the broker at all. Its session (testSessionTimeout, 2 s) runs from
	// its last heartbeat, at most an interval (testHeartbeat, 200 ms)
	// before the cut, and it heartbeats again within tens of milliseconds
	// of its links (docs/operations.md, "Crashes and silence"): 1.2 s
	// leaves 600 ms, three intervals, for a loaded machine. Longer blips
	// may end in a session fence (never a crash fence).
	blipNoFenceWithin = testSessionTimeout - 4*testHeartbeat
	// restoreAcks is how many records each partition must have
	// acknowledged after a restore: more than a producer buffers (64), so
	// that at least one of them was sent after it.
	restoreAcks = 65
)

// grayOutcome is what a gray fault did.
type grayOutcome int

const (
	grayInjected grayOutcome = iota
	// graySkipped: its precondition did not hold (every ISR full, every
	// partition led): nothing was done.
	graySkipped
	// grayStop: the cluster did not recover from it; the test has failed,
	// and the nemesis stops, so that the final read still runs.
	grayStop
)

// grayTally counts what the gray faults did, for the report.
type grayTally struct {
	// powerLosses holds the offsets each power loss cut from the broker's
	// logs; elrWaits counts the losses of an ISR's last member after which
	// the partition waited for its ELR member, as it must.
	powerLosses []int64
	elrWaits    int
	// short and long are the blips of 50-450 ms and of 1-2 s.
	short, long blipTally
	// restores holds how long each restore left a partition without a
	// leader above its epochs before, or without writes.
	restores []time.Duration
	// skipped counts the gray faults not injected, by kind.
	skipped map[string]int
}

// blipTally counts a kind of broker link blip and what it caused.
type blipTally struct {
	n int
	// The controllers' counts over the blips: fences by cause, and dials
	// of the broker's port at the end of the grace, by result.
	crash, session, listening, refused int
	// unended counts blips after which the broker opened no new metadata
	// stream: its stream was not cut (a blip that tested nothing).
	unended int
	// back holds how long after each blip's end the broker's new stream
	// had its first push.
	back []time.Duration
}

func (b *blipTally) add(o *blipTally) {
	b.n += o.n
	b.crash += o.crash
	b.session += o.session
	b.listening += o.listening
	b.refused += o.refused
	b.unended += o.unended
	b.back = append(b.back, o.back...)
}

func (b *blipTally) String() string {
	if b.n == 0 {
		return "0"
	}
	s := fmt.Sprintf("%d (fences: %d crash, %d session_expired; dials of its port: %d listening, %d refused", b.n, b.crash, b.session, b.listening, b.refused)
	if b.unended > 0 {
		s += fmt.Sprintf("; %d cut no stream", b.unended)
	}
	if len(b.back) == 0 {
		return s + ")"
	}
	back := slices.Clone(b.back)
	return s + fmt.Sprintf("; a new stream's first push %v after the links came back at the median, %v at most)",
		medianDuration(back).Round(time.Millisecond), slices.Max(back).Round(time.Millisecond))
}

func (g *grayTally) add(o *grayTally) {
	g.powerLosses = append(g.powerLosses, o.powerLosses...)
	g.elrWaits += o.elrWaits
	g.short.add(&o.short)
	g.long.add(&o.long)
	g.restores = append(g.restores, o.restores...)
	for k, v := range o.skipped {
		if g.skipped == nil {
			g.skipped = map[string]int{}
		}
		g.skipped[k] += v
	}
}

// write adds the gray faults' lines to a tally's report, if any was
// tried (the unclean mode tries none).
func (g *grayTally) write(b *strings.Builder) {
	if len(g.powerLosses)+g.short.n+g.long.n+len(g.restores)+len(g.skipped) == 0 {
		return
	}
	var cut []string
	for _, n := range g.powerLosses {
		cut = append(cut, fmt.Sprint(n))
	}
	fmt.Fprintf(b, "\npower losses: %d (offsets cut by each: [%s]; an ISR's last member's, the partition waiting for its ELR member: %d)",
		len(g.powerLosses), strings.Join(cut, " "), g.elrWaits)
	fmt.Fprintf(b, "\nbroker link blips: %v-%v %v; %v-%v %v", blipShort[0], blipShort[1], &g.short, blipLong[0], blipLong[1], &g.long)
	if len(g.restores) > 0 {
		rs := slices.Clone(g.restores)
		fmt.Fprintf(b, "\nrestores: %d, every partition led above its epochs and taking writes after %v at the median, %v at most",
			len(rs), medianDuration(rs).Round(time.Millisecond), slices.Max(rs).Round(time.Millisecond))
	} else {
		b.WriteString("\nrestores: 0")
	}
	if len(g.skipped) > 0 {
		b.WriteString("\nnot injected (a precondition did not hold):")
		for _, k := range sortedKeys(g.skipped) {
			fmt.Fprintf(b, " %s=%d", k, g.skipped[k])
		}
	}
}

// The lengths of broker link blips: shorter than the crash grace, and
// longer (the range of the long ones straddles blipNoFenceWithin).
var (
	blipShort = [2]time.Duration{50 * time.Millisecond, 450 * time.Millisecond}
	blipLong  = [2]time.Duration{time.Second, 2 * time.Second}
)

// grayFault injects a gray fault of kind on topic-part, or on the broker
// leader returns (its leader, or any broker when it has none), for lengths
// drawn by hold; rng draws its other choices.
func (r *dataRun) grayFault(t *testing.T, rng *rand.Rand, kind string, from time.Time, topic string, part int32,
	leader func() (int32, string), hold func(lo, hi time.Duration) time.Duration, tally *dataTally) grayOutcome {
	var out grayOutcome
	// Whole milliseconds, to read in the report.
	draw := hold
	hold = func(lo, hi time.Duration) time.Duration { return draw(lo, hi).Round(time.Millisecond) }
	switch kind {
	case "power-loss-broker":
		id, how := leader()
		out = r.powerLossBroker(t, from, kind, id, how, hold(200*time.Millisecond, 3*time.Second), &tally.gray)
	case "power-loss-last-isr-member":
		out = r.powerLossLastISRMember(t, from, kind, topic, part, hold(200*time.Millisecond, 2*time.Second), &tally.gray)
	case "restore-snapshot":
		out = r.restoreSnapshot(t, from, kind, &tally.gray)
	case "blip-broker-links":
		d, long := hold(blipShort[0], blipShort[1]), false
		if rng.IntN(4) == 0 {
			d, long = hold(blipLong[0], blipLong[1]), true
		}
		id, how := leader()
		r.blipBrokerLinks(t, from, kind, id, how, d, long, &tally.gray)
	}
	if out == graySkipped {
		if tally.gray.skipped == nil {
			tally.gray.skipped = map[string]int{}
		}
		tally.gray.skipped[kind]++
	}
	return out
}

// ---------------------------------------------------------------------------
// Power losses
//
// What a power loss may take is what docs/storage.md guarantees ("What
// acknowledged records survive"): "fewer than min.insync.replicas unclean
// restarts between catch-ups never lose one, whatever they are, and one
// power loss can when min.insync.replicas is 1". The topics here have
// min.insync.replicas=2, so the nemesis injects at most one unclean restart
// (a kill -9, a power loss, a broker stopped by a failed write) between
// catch-ups wherever a power loss is involved: a power loss only once every
// ISR is full (every replica has fetched every acknowledged record, which
// ends the window of the unclean restarts before it), and nothing after it
// until every ISR is full again. Two brokers losing power at once, or one
// losing power while another replica of its partitions has not caught up
// since a kill, may lose acknowledged records by design; neither is
// injected. (Kills alone lose nothing: the page cache survives a process.)

// waitCaughtUp polls the controllers until every partition of every topic
// is led with all its replicas in its ISR, for at most limit. It reports
// whether they were, how long that took, and the last state it saw.
func (r *dataRun) waitCaughtUp(limit time.Duration) (bool, time.Duration, string) {
	start := time.Now()
	state := ""
	err := poll.Wait(context.Background(), limit, 50*time.Millisecond, "", func() (bool, error) {
		for _, topic := range r.topics {
			d, err := r.c.DescribeTopicE(context.Background(), topic)
			if err != nil {
				state = err.Error()
				return false, nil
			}
			if !d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == len(p.Replicas) }) {
				state = formatTopic(d)
				return false, nil
			}
		}
		return true, nil
	})
	return err == nil, time.Since(start), state
}

// powerLoss emulates a power loss of broker id and returns how many
// offsets it cut from the broker's logs, and says so.
func (r *dataRun) powerLoss(t *testing.T, id int32, g *grayTally) (int64, string) {
	t.Helper()
	cuts, err := r.c.h.PowerLoss(r.c.broker(id))
	if err != nil {
		t.Fatalf("power loss of broker %d: %v", id, err)
	}
	var n int64
	logs := 0
	for _, c := range cuts {
		if d := c.Before - c.After; d > 0 {
			n += d
			logs++
		}
	}
	g.powerLosses = append(g.powerLosses, n)
	return n, fmt.Sprintf("%d offsets cut from %d of its %d logs", n, logs, len(cuts))
}

// skip records a gray fault that was not injected, and why.
func (r *dataRun) skip(from time.Time, kind, why string) grayOutcome {
	r.fault(from, "%s: not injected: %s", kind, why)
	return graySkipped
}

// caughtUpAfter waits, after a power loss, for every ISR to be full again:
// the catch-up that ends its window. A cluster that does not get there
// fails the test and stops the nemesis.
func (r *dataRun) caughtUpAfter(t *testing.T, kind string) (time.Duration, grayOutcome) {
	t.Helper()
	ok, took, state := r.waitCaughtUp(healTimeout)
	if !ok {
		t.Errorf("%s: the ISRs were not full again %v after the power loss:\n%s", kind, took.Round(time.Millisecond), state)
		return took, grayStop
	}
	return took, grayInjected
}

// powerLossBroker: from full ISRs, broker id loses power, stays down for
// down, and starts again; the nemesis goes on once every ISR is full
// again. Its partitions' other replicas hold every acknowledged record.
func (r *dataRun) powerLossBroker(t *testing.T, from time.Time, kind string, id int32, how string, down time.Duration, g *grayTally) grayOutcome {
	t.Helper()
	if ok, _, state := r.waitCaughtUp(healTimeout / 4); !ok {
		return r.skip(from, kind, "the ISRs were not full:\n"+state)
	}
	_, cut := r.powerLoss(t, id, g)
	after := "not started again"
	defer func() {
		r.fault(from, "%s: power loss of %s %d (%s), down for %v; %s", kind, how, id, cut, down, after)
	}()
	time.Sleep(down) // the fault's length, not synchronisation
	r.restartBroker(id)
	took, out := r.caughtUpAfter(t, kind)
	after = fmt.Sprintf("ISRs full again %v after its start", took.Round(time.Millisecond))
	return out
}

// powerLossLastISRMember is issue 26's power loss (item 4) in the suite:
// from full ISRs, topic-part's leader L keeps it while one follower, S,
// stops cleanly (SIGTERM: a controlled shutdown, no unclean restart) and
// the other, F, is paused past its session: ISR [L], ELR [F], and F holds
// every acknowledged record (the high watermark does not move while the
// ISR is below min.insync.replicas). L then loses power, stays down for
// down and starts again, reporting an unclean shutdown: it must leave the
// ISR even as its last member, and the partition must wait for F, without
// a leader; F resumes and leads, L follows it, and S starts again. Keeping
// L as the ISR's last member lost every record it had not fsynced.
func (r *dataRun) powerLossLastISRMember(t *testing.T, from time.Time, kind, topic string, part int32, down time.Duration, g *grayTally) grayOutcome {
	t.Helper()
	c := r.c
	if ok, _, state := r.waitCaughtUp(healTimeout / 4); !ok {
		return r.skip(from, kind, "the ISRs were not full:\n"+state)
	}
	d, err := c.DescribeTopicE(context.Background(), topic)
	if err != nil || int(part) >= len(d.Partitions) || d.Partitions[part].Leader <= 0 {
		return r.skip(from, kind, fmt.Sprintf("%s-%d has no leader to start from (%v)", topic, part, err))
	}
	p := d.Partitions[part]
	leader, followers := p.Leader, without(p.Replicas, p.Leader)
	follower, other := followers[0], followers[1]
	brokers := func() map[int32]string {
		return map[int32]string{leader: stateActive, follower: stateFenced, other: stateFenced}
	}
	var states []string // what was seen at each step, for the fault's line
	step := func(what string, ok func(partitionJSON) bool) bool {
		t.Helper()
		if r.waitPartition(topic, part, ok) {
			states = append(states, what)
			return true
		}
		t.Errorf("%s: %s-%d never %s: %s", kind, topic, part, what, c.cliDescribe(t, topic).partition(t, part))
		return false
	}
	defer func() {
		r.fault(from, "%s: %s-%d led by %d: stopped %d (SIGTERM), paused %d past its session, power loss of %d, started again after %v, resumed %d, started %d: %s",
			kind, topic, part, leader, other, follower, leader, down, follower, other, strings.Join(states, "; "))
	}()

	c.StopBroker(other)
	ok := step(fmt.Sprintf("led by %d with ISR [%d %d] after %d stopped", leader, leader, follower, other), func(p partitionJSON) bool {
		return p.Leader == leader && sameSet(p.ISR, []int32{leader, follower}) && len(p.ELR) == 0
	})
	if ok {
		c.PauseBroker(follower)
		c.waitBrokerState(t, follower, stateFenced, time.Now().Add(brokersTimeout))
		ok = step(fmt.Sprintf("ISR [%d], ELR [%d]", leader, follower), func(p partitionJSON) bool {
			return p.Leader == leader && slices.Equal(p.ISR, []int32{leader}) && slices.Equal(p.ELR, []int32{follower})
		})
		if !ok {
			c.ResumeBroker(follower)
		}
	}
	if !ok {
		r.restartBroker(other)
		return grayStop
	}
	old := c.WaitForBrokers(t, brokers())[leader].GetEpoch()
	_, what := r.powerLoss(t, leader, g)
	states = append(states, what)
	time.Sleep(down) // the fault's length, not synchronisation
	r.restartBroker(leader)
	c.WaitForReregistered(t, brokers(), leader, old)
	// Its unfencing elected what it could: nothing may lead while F, the
	// only replica known to hold everything, is away.
	pd := c.cliDescribe(t, topic).partition(t, part)
	if pd.Leader != noLeader || len(pd.ISR) != 0 || !slices.Equal(pd.ELR, []int32{follower}) {
		t.Errorf("%s: with broker %d back after its power loss and broker %d paused: %s; want no leader, ISR [], ELR [%d]",
			kind, leader, follower, pd, follower)
	} else {
		g.elrWaits++
		states = append(states, pd.NoLeaderReason)
	}
	c.ResumeBroker(follower)
	step(fmt.Sprintf("led by %d, the ELR member", follower), func(p partitionJSON) bool { return p.Leader == follower })
	r.restartBroker(other)
	took, out := r.caughtUpAfter(t, kind)
	states = append(states, fmt.Sprintf("ISRs full again %v later", took.Round(time.Millisecond)))
	return out
}

// ---------------------------------------------------------------------------
// Restores

// restoreSnapshot restores r.snapshot, saved before the faults, into the
// running cluster (`keel snapshot restore`) while the producers write. It
// puts back the topics' state as it was, at epochs above every one used
// since (docs/design.md, "Restores and epochs"): within
// restoreRecoveryLimit every partition must be led at leader and
// partition epochs above those before the restore, and have acknowledged
// restoreAcks records since. It records how long that took.
func (r *dataRun) restoreSnapshot(t *testing.T, from time.Time, kind string, g *grayTally) grayOutcome {
	t.Helper()
	c := r.c
	// From partitions that are all led, so that the time measured is the
	// restore's, not the last fault's.
	before := map[string]topicJSON{}
	state := ""
	err := poll.Wait(context.Background(), healTimeout/4, 50*time.Millisecond, "", func() (bool, error) {
		for _, topic := range r.topics {
			d, err := c.DescribeTopicE(context.Background(), topic)
			if err != nil || !d.every(func(p partitionJSON) bool { return p.Leader > 0 }) {
				state = fmt.Sprintf("%s: %v\n%s", topic, err, formatTopic(d))
				return false, nil
			}
			before[topic] = d
		}
		return true, nil
	})
	if err != nil {
		return r.skip(from, kind, "a partition had no leader: "+state)
	}
	var res restoreJSON
	c.keelJSON(t, &res, "snapshot", "restore", r.snapshot)
	restored := time.Now()
	recovered := fmt.Sprintf("not within %v", restoreRecoveryLimit)
	defer func() { // a failed wait ends the test: say what was done all the same
		r.fault(from, "%s: restored the snapshot of the start (index %d, controller epoch %d); every partition led above its epochs and taking writes %s",
			kind, res.SnapshotIndex, res.ControllerEpoch, recovered)
	}()
	poll.UntilState(t, restoreRecoveryLimit, fmt.Sprintf("every partition led at epochs above those before the restore, and %d records acknowledged on each since", restoreAcks), func() (bool, string) {
		var behind []string // every partition not there yet, to show what a restore broke
		for i, topic := range r.topics {
			d, err := c.DescribeTopicE(context.Background(), topic)
			if err != nil {
				return false, err.Error()
			}
			acks := r.prods[i].ackedSince(restored)
			for _, p := range d.Partitions {
				ok, why := epochsAbove(topicJSON{Partitions: []partitionJSON{p}}, before[topic], true)
				if n := acks[p.Partition]; !ok || n < restoreAcks {
					behind = append(behind, fmt.Sprintf("%s %s: %d records acknowledged since the restore; %s", topic, p, n, why))
				}
			}
		}
		return len(behind) == 0, strings.Join(behind, "\n")
	})
	took := time.Since(restored)
	g.restores = append(g.restores, took)
	recovered = fmt.Sprintf("%v later", took.Round(time.Millisecond))
	return grayInjected
}

// ackedSince returns how many records p has had acknowledged after at, by
// partition.
func (p *streamProducer) ackedSince(at time.Time) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := make([]int, p.partitions)
	for _, a := range p.acked {
		if a.at.After(at) {
			n[a.partition]++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// Broker link blips

// The controllers' counts of broker fences and of the dials before a crash
// fence.
var fenceSeries = []string{crashFences, sessionFences, probesListening, probesRefused}

// fenceTotals sums fenceSeries over the controllers, waiting until every
// one answers: a sum without one could hide its fence.
func (r *dataRun) fenceTotals(t *testing.T) map[string]float64 {
	t.Helper()
	addrs := map[int32]string{}
	for _, id := range r.c.IDs() {
		addrs[id] = r.c.node(id).MetricsAddr()
	}
	sum := map[string]float64{}
	poll.UntilState(t, brokersTimeout, "every controller to answer a scrape of its metrics", func() (bool, string) {
		byNode, desc := scrapeAll(addrs, fenceSeries...)
		if len(byNode) < len(addrs) {
			return false, desc
		}
		clear(sum)
		for _, s := range byNode {
			for _, n := range fenceSeries {
				sum[n] += s[n]
			}
		}
		return true, ""
	})
	return sum
}

// blipBrokerLinks drops every link of broker id to the controllers
// (faultproxy.Drop: connections reset, new ones refused) for d, while its
// process, its port and its followers' links stay up, and checks what
// docs/operations.md ("Crashes and silence") says must follow: never a
// fence for a crash, and no dial of its port refused; no fence at all
// within blipNoFenceWithin (a blip shorter than the crash grace is seen
// again within it; a longer one is left to its session once a dial finds
// its port listening); longer, at most a session fence; and in every case
// the broker is active again at the same epoch: the same incarnation. The
// counts are the controllers' (keel_controller_fenced_brokers_total and
// keel_controller_broker_crash_probes_total, before and after the blip,
// which no other fault overlaps), and the fences the brokers replayed.
func (r *dataRun) blipBrokerLinks(t *testing.T, from time.Time, kind string, id int32, how string, d time.Duration, long bool, g *grayTally) {
	t.Helper()
	c := r.c
	epochs := c.WaitForBrokers(t, allActive(r.brokers...))
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("a controller to hold broker %d's stream", id), func() (bool, string) { return c.streamOpen(id) })
	active := r.activeController()
	before := r.fenceTotals(t)
	mark := c.brokerLogMark()

	line := fmt.Sprintf("links of %s %d to the controllers dropped for %v", how, id, d)
	defer func() { r.fault(from, "%s: %s", kind, line) }() // a failed wait ends the test: said all the same
	c.setBrokerLinks(id, faultproxy.Drop)
	cut := time.Now()
	time.Sleep(d) // the fault's length, not synchronisation
	c.setBrokerLinks(id, faultproxy.Up)
	healed := time.Now()
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("broker %d to stream metadata again after a %v blip", id, d), func() (bool, string) {
		open, desc := c.streamOpen(id)
		// Time for a wrong crash fence to be decided and show.
		return open && time.Since(healed) >= 2*dataCrashGrace, desc
	})
	after := c.WaitForBrokers(t, allActive(r.brokers...))
	now := r.fenceTotals(t)
	delta := func(n string) int { return int(now[n] - before[n]) }

	b := blipTally{n: 1, crash: delta(crashFences), session: delta(sessionFences), listening: delta(probesListening),
		refused: delta(probesRefused)}
	// The first push of the stream the broker opened once its links were
	// back: the blip cut its stream, and this is when it was back.
	back := "no new stream"
	if push := c.firstPushAfter(id, cut); push.IsZero() {
		b.unended = 1
	} else {
		b.back = []time.Duration{push.Sub(healed)}
		back = fmt.Sprintf("a new stream's first push %v after the links came back", push.Sub(healed).Round(time.Millisecond))
	}
	logged := 0
	for _, f := range c.fencesLoggedSince(mark) {
		if f.id == id && f.reporter == id {
			logged++
		}
	}
	size := &g.short
	if long {
		size = &g.long
	}
	size.add(&b)
	line += fmt.Sprintf(": fences %d crash, %d session_expired (%d replayed); its port dialled %d times listening, %d refused; %s",
		b.crash, b.session, logged, b.listening, b.refused, back)

	switch {
	case b.crash > 0 || b.refused > 0:
		t.Errorf("%s: broker %d, whose links dropped for %v while its port listened, was fenced for a crash %d times, its port refused %d dials",
			kind, id, d, b.crash, b.refused)
	case d <= blipNoFenceWithin && (b.session > 0 || logged > 0):
		t.Errorf("%s: broker %d, whose links dropped for %v (back within its %v session), was fenced: %d session fences, %d replayed",
			kind, id, d, testSessionTimeout, b.session, logged)
	case long && b.listening == 0 && active > 0 && active == r.activeController():
		t.Errorf("%s: broker %d's links dropped for %v, longer than the %v crash grace: the active controller (%d) never dialled its port",
			kind, id, d, dataCrashGrace, active)
	}
	if after[id].GetEpoch() != epochs[id].GetEpoch() {
		t.Errorf("%s: broker %d is at epoch %d after its links dropped for %v, %d before: it registered again, as if it had died",
			kind, id, after[id].GetEpoch(), d, epochs[id].GetEpoch())
	}
}
