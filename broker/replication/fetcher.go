package replication

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fetcher is this broker's fetching from one leader broker (Kafka's
// ReplicaFetcherThread, with num.replica.fetchers=1): every partition it
// follows from that leader, on one fetch session. A leader that serves no
// sessions (a broker of an older version) is fetched from the old way, one
// loop per partition (runFollower), until the fetcher has no partition
// left.
type fetcher struct {
	m      *Manager
	leader int32
	ctx    context.Context

	mu    sync.Mutex
	parts map[broker.TopicPartition]*fetchedPart
	// legacy: the leader answered Unimplemented; each partition has its
	// own loop.
	legacy bool
	// changed is poked when a partition is added or removed.
	changed chan struct{}
	// failing: the sessions failing now; only run touches it.
	failing failStreak
}

// fetchedPart is one partition the fetcher follows, under the role of
// generation gen.
type fetchedPart struct {
	r     *replica
	gen   uint64
	epoch int32
	// After a refusal the partition leaves the session until retryAt.
	failures int
	retryAt  time.Time
	// stop ends its own loop, in legacy mode.
	stop context.CancelFunc
}

// sentState is a partition's fetch state as the leader's session holds it.
type sentState struct {
	gen                uint64
	epoch, lastFetched int32
	offset, logStart   int64
}

// follow makes r, of the current generation, fetch from leader at epoch on
// this broker's fetcher for that leader. The caller holds r.roleMu, mu and
// r.mu, and reset stops it.
func (m *Manager) follow(r *replica, leader, epoch int32) {
	f := m.fetchers[leader]
	if f == nil {
		f = &fetcher{m: m, leader: leader, ctx: m.ctx, parts: map[broker.TopicPartition]*fetchedPart{}, changed: make(chan struct{}, 1)}
		m.fetchers[leader] = f
		m.wg.Add(1)
		go f.run()
	}
	gen := r.gen
	f.add(&fetchedPart{r: r, gen: gen, epoch: epoch})
	r.stopFetch = func() { f.remove(r.tp, gen) }
}

func (f *fetcher) add(p *fetchedPart) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.parts[p.r.tp]; old != nil && old.stop != nil {
		old.stop()
	}
	f.parts[p.r.tp] = p
	if f.legacy {
		f.startLoop(p)
	}
	f.poke()
}

// remove drops tp if it is still of generation gen.
func (f *fetcher) remove(tp broker.TopicPartition, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.parts[tp]
	if p == nil || p.gen != gen {
		return
	}
	if p.stop != nil {
		p.stop()
	}
	delete(f.parts, tp)
	if len(f.parts) == 0 {
		// The next partitions try a session again: a leader upgraded
		// since serves them.
		f.legacy = false
	}
	f.poke()
}

func (f *fetcher) poke() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// startLoop starts p's own fetch loop. The caller holds f.mu.
func (f *fetcher) startLoop(p *fetchedPart) {
	ctx, cancel := context.WithCancel(f.ctx)
	p.stop = cancel
	f.m.wg.Add(1)
	go f.m.runFollower(ctx, p.r, p.gen, f.leader, p.epoch)
}

// run keeps a session with the leader while the fetcher has partitions.
func (f *fetcher) run() {
	m := f.m
	defer m.wg.Done()
	failures := 0
	for f.ctx.Err() == nil {
		f.mu.Lock()
		idle := f.legacy || len(f.parts) == 0
		f.mu.Unlock()
		if idle {
			select {
			case <-f.ctx.Done():
				return
			case <-f.changed:
			}
			continue
		}
		answered, err := f.session()
		if f.ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			m.log.Info("the leader serves no fetch sessions; fetching each partition on its own", "leader", f.leader)
			f.mu.Lock()
			f.legacy = true
			for _, p := range f.parts {
				f.startLoop(p)
			}
			f.mu.Unlock()
			continue
		}
		if answered {
			failures = 0
		}
		failures++
		f.noteSession(err)
		select {
		case <-f.ctx.Done():
			return
		case <-m.clock.After(retryBackoff(err, failures, m.cfg.FetchBackoff)):
		}
	}
}

// noteSession logs when the sessions with the leader start or stop
// failing, by what it tells an operator (failStreak). Only run calls it.
func (f *fetcher) noteSession(err error) {
	m := f.m
	now := m.clock.Now()
	if err == nil {
		if level, d, ok := f.failing.ok(now); ok {
			m.log.Log(context.Background(), level, "fetch session with the leader works again", "leader", f.leader,
				"failed_for", d.Round(time.Millisecond).String())
		}
		return
	}
	if level, ok := f.failing.failed(err, now); ok {
		m.log.Log(context.Background(), level, "fetch session with the leader failed; starting another", "leader", f.leader,
			"reason", rpc.ReasonOf(err), "err", status.Convert(err).Message())
	}
}

// maxInFlight is the most requests a session has sent unanswered: the
// one the leader may be long-polling, and one that ends that wait because
// the session's partitions changed.
const maxInFlight = 2

// inFlight is a request sent and not yet answered: its changes to the
// session, which its answer is applied under.
type inFlight struct {
	changed   map[broker.TopicPartition]sentState
	forgotten []broker.TopicPartition
	wait      time.Duration
}

// session runs one fetch session until it fails; answered says whether
// the leader answered at all.
//
// A request goes out when the last answer came in, and also, while one is
// outstanding, as soon as the partitions change (a partition added, or
// back from its back-off): the leader ends its long-poll when a request
// arrives, answers the round in progress, then serves the new one, so
// that a leader change does not wait for the fetch interval. Each request
// gets one answer, in order; an answer is applied under the partitions'
// fetch state as of its own request (answering), which held is ahead of
// while a later request is in flight.
func (f *fetcher) session() (answered bool, err error) {
	m := f.m
	conn, err := m.conn(f.leader)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stream, err := conn.FetchSession(ctx)
	if err != nil {
		return false, err
	}
	// A leader answers within the wait it was asked for; one that does not
	// (a link that silently dropped) ends the session.
	watchdog := time.AfterFunc(time.Hour, cancel)
	defer watchdog.Stop()

	// The answers are received on their own goroutine, into one of
	// maxInFlight answers handed back once applied.
	type result struct {
		ans *sessionAnswer
		err error
	}
	free := make(chan *sessionAnswer, maxInFlight)
	results := make(chan result, maxInFlight)
	for range maxInFlight {
		free <- &sessionAnswer{}
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			var a *sessionAnswer
			select {
			case a = <-free:
			case <-ctx.Done():
				return
			}
			err := stream.RecvMsg(a)
			results <- result{a, err}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
		for {
			select {
			case r := <-results:
				r.ans.release()
			default:
				return
			}
		}
	}()

	held := map[broker.TopicPartition]sentState{}      // as of the last request sent
	answering := map[broker.TopicPartition]sentState{} // as of the request answered next
	var pending []inFlight
	changed := true
	var retry <-chan time.Time
	for {
		if changed && len(pending) < maxInFlight {
			req, fl, backoff := f.request(held, len(pending) == 0)
			changed = false
			if req != nil {
				if err := stream.Send(req); err != nil {
					// The stream's status, once the answers before it.
					for r := range results {
						r.ans.release()
						if r.err != nil {
							return answered, r.err
						}
						free <- r.ans
					}
				}
				if len(pending) == 0 {
					watchdog.Reset(fl.wait + fetchTimeout)
				}
				pending = append(pending, fl)
			}
			// Woken when a partition comes back from its back-off, or
			// to look again at an empty session; otherwise changes come
			// by f.changed and answers.
			retry = nil
			switch {
			case backoff > 0:
				retry = m.clock.After(backoff)
			case len(pending) == 0:
				retry = m.clock.After(m.cfg.FetchMaxWait)
			}
		}
		select {
		case <-ctx.Done():
			return answered, ctx.Err()
		case <-f.changed:
			changed = true
		case <-retry:
			changed = true
		case r := <-results:
			if r.err != nil {
				r.ans.release()
				return answered, r.err
			}
			if len(pending) == 0 {
				r.ans.release()
				return answered, status.Error(codes.Internal, "the leader answered a fetch session request not sent")
			}
			if !answered {
				answered = true
				m.sessionMetrics.following.Inc()
				defer m.sessionMetrics.following.Dec()
				f.noteSession(nil)
			}
			fl := pending[0]
			pending = pending[1:]
			for _, tp := range fl.forgotten {
				delete(answering, tp)
			}
			maps.Copy(answering, fl.changed)
			if len(pending) > 0 {
				watchdog.Reset(pending[0].wait + fetchTimeout)
			} else {
				watchdog.Stop()
				changed = true
			}
			f.apply(r.ans, answering)
			r.ans.release()
			free <- r.ans
		}
	}
}

// request builds the next request of a session whose leader holds held
// (updated as if sent): the partitions whose fetch state changed or that
// are new, and those to forget (removed, or backing off after an error),
// with those changes as an inFlight. It returns nil when the session is
// empty, or when the request would change nothing and !always; and how
// long until the first partition backing off may come back (0 if none).
func (f *fetcher) request(held map[broker.TopicPartition]sentState, always bool) (*keelpb.FetchSessionRequest, inFlight, time.Duration) {
	m := f.m
	req := &keelpb.FetchSessionRequest{ReplicaId: m.self, BrokerEpoch: m.link.BrokerEpoch(),
		MaxWaitMs: int32(m.cfg.FetchMaxWait / time.Millisecond), MaxBytes: int32(m.cfg.FetchResponseMaxBytes)}
	fl := inFlight{changed: map[broker.TopicPartition]sentState{}}
	now := m.clock.Now()
	var backoff time.Duration
	f.mu.Lock()
	defer f.mu.Unlock()
	room := rpc.MaxFetchSessionPartitions
	for tp := range held {
		if room == 0 {
			break
		}
		if p := f.parts[tp]; p == nil || now.Before(p.retryAt) {
			req.Forgotten = append(req.Forgotten, &keelpb.FetchSessionPartitionKey{TopicId: tp.TopicID[:], Partition: tp.Partition})
			fl.forgotten = append(fl.forgotten, tp)
			delete(held, tp)
			room--
		}
	}
	for tp, p := range f.parts {
		if now.Before(p.retryAt) {
			if d := p.retryAt.Sub(now); backoff == 0 || d < backoff {
				backoff = d
			}
			continue
		}
		if room == 0 {
			break
		}
		l := p.r.log
		st := sentState{gen: p.gen, epoch: p.epoch, lastFetched: -1, offset: l.LogEndOffset(), logStart: l.LogStartOffset()}
		if last, ok := l.LatestEpoch(); ok {
			st.lastFetched = last
		}
		if held[tp] == st {
			continue
		}
		held[tp] = st
		fl.changed[tp] = st
		room--
		part := &keelpb.FetchSessionPartition{TopicId: tp.TopicID[:], Partition: tp.Partition, LeaderEpoch: st.epoch,
			FetchOffset: st.offset, LogStartOffset: st.logStart, MaxBytes: m.cfg.FetchMaxBytes}
		if st.lastFetched >= 0 {
			part.LastFetchedEpoch = &st.lastFetched
		}
		req.Partitions = append(req.Partitions, part)
	}
	if len(held) == 0 && len(req.Forgotten) == 0 || !always && len(req.Partitions) == 0 && len(req.Forgotten) == 0 {
		return nil, fl, backoff
	}
	if len(held) == 0 {
		req.MaxWaitMs = 0
	}
	fl.wait = time.Duration(req.MaxWaitMs) * time.Millisecond
	return req, fl, backoff
}

// apply applies an answer's partitions, each under the role and fetch
// state it was fetched with (states, as of the answered request), by the
// rules of a unary fetch's answer (applyFetch, outOfRange); a refused
// partition backs off out of the session.
func (f *fetcher) apply(ans *sessionAnswer, states map[broker.TopicPartition]sentState) {
	m := f.m
	for i := range ans.parts {
		d := &ans.parts[i]
		sent, ok := states[d.tp]
		f.mu.Lock()
		p := f.parts[d.tp]
		f.mu.Unlock()
		if !ok || p == nil || p.gen != sent.gen {
			continue // of a role that ended: the next request says so
		}
		var err error
		if e := d.err; e != nil {
			err = sessionError(e)
			if e.GetReason() == ReasonOffsetOutOfRange {
				err = m.outOfRange(p.r, p.gen, sent.offset, err)
			}
		} else {
			err = m.applyFetch(p.r, p.gen, sent.offset, fetchAnswer{hw: d.hw, logStart: d.logStart, records: d.records, diverging: d.diverging})
			m.recordFollowerBytes(d.tp, len(d.records))
		}
		f.mu.Lock()
		failed := p.failures > 0
		if err != nil {
			p.failures++
			p.retryAt = m.clock.Now().Add(retryBackoff(err, p.failures, m.cfg.FetchBackoff))
		} else {
			p.failures = 0
			// A throttled replica over the follower quota leaves the
			// session until the quota allows again, as a refused one does
			// (Kafka's follower leaves it out of its fetches).
			if hold := m.followerThrottled(d.tp); hold > 0 {
				p.retryAt = m.clock.Now().Add(hold)
			}
		}
		f.mu.Unlock()
		if err != nil || failed {
			m.noteFetch(p.r, p.gen, f.leader, p.epoch, err)
		}
	}
}

// sessionError is a partition's refusal as the status error a unary fetch
// answers, so that one set of rules handles both.
func sessionError(e *keelpb.FetchPartitionError) error {
	var meta map[string]string
	if e.GetReason() == ReasonOffsetOutOfRange {
		meta = map[string]string{metaLogStart: strconv.FormatInt(e.GetLogStartOffset(), 10), metaLogEnd: strconv.FormatInt(e.GetLogEndOffset(), 10)}
	}
	code := codes.Code(e.GetCode())
	if code == codes.OK {
		code = codes.Unknown
	}
	return withReason(code, e.GetReason(), e.GetMessage(), meta)
}
