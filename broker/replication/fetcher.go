package replication

import (
	"context"
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
// this broker's fetcher for that leader. The caller holds mu (and r's
// roleMu), and reset stops it.
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
		if failures == 1 {
			m.log.Info("fetch session with the leader failed; starting another", "leader", f.leader,
				"reason", rpc.ReasonOf(err), "err", status.Convert(err).Message())
		}
		select {
		case <-f.ctx.Done():
			return
		case <-m.clock.After(retryBackoff(err, failures, m.cfg.FetchBackoff)):
		}
	}
}

// session runs one fetch session until it fails; answered says whether
// the leader answered at all.
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
	held := map[broker.TopicPartition]sentState{}
	var ans sessionAnswer
	defer ans.release()
	for {
		req, wait := f.request(held)
		if req == nil {
			select {
			case <-ctx.Done():
				return answered, ctx.Err()
			case <-f.changed:
			case <-m.clock.After(wait):
			}
			continue
		}
		if err := stream.Send(req); err != nil {
			_, err = stream.Recv() // the stream's status
			return answered, err
		}
		watchdog.Reset(time.Duration(req.GetMaxWaitMs())*time.Millisecond + fetchTimeout)
		err := stream.RecvMsg(&ans)
		watchdog.Stop()
		if err != nil {
			return answered, err
		}
		if !answered {
			answered = true
			m.sessionMetrics.following.Inc()
			defer m.sessionMetrics.following.Dec()
		}
		f.apply(&ans, held)
		ans.release()
	}
}

// request builds the next request of a session whose leader holds held
// (updated as if sent): the partitions whose fetch state changed or that
// are new, and those to forget (removed, or backing off after an error).
// It returns nil when the session is empty, with how long the caller may
// wait for a partition to come back from its back-off.
func (f *fetcher) request(held map[broker.TopicPartition]sentState) (*keelpb.FetchSessionRequest, time.Duration) {
	m := f.m
	req := &keelpb.FetchSessionRequest{ReplicaId: m.self, BrokerEpoch: m.link.BrokerEpoch(),
		MaxWaitMs: int32(m.cfg.FetchMaxWait / time.Millisecond), MaxBytes: int32(m.cfg.FetchResponseMaxBytes)}
	now := m.clock.Now()
	wait := m.cfg.FetchMaxWait
	f.mu.Lock()
	defer f.mu.Unlock()
	room := rpc.MaxFetchSessionPartitions
	for tp := range held {
		if room == 0 {
			break
		}
		if p := f.parts[tp]; p == nil || now.Before(p.retryAt) {
			req.Forgotten = append(req.Forgotten, &keelpb.FetchSessionPartitionKey{TopicId: tp.TopicID[:], Partition: tp.Partition})
			delete(held, tp)
			room--
		}
	}
	for tp, p := range f.parts {
		if now.Before(p.retryAt) {
			wait = min(wait, p.retryAt.Sub(now))
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
		room--
		part := &keelpb.FetchSessionPartition{TopicId: tp.TopicID[:], Partition: tp.Partition, LeaderEpoch: st.epoch,
			FetchOffset: st.offset, LogStartOffset: st.logStart, MaxBytes: m.cfg.FetchMaxBytes}
		if st.lastFetched >= 0 {
			part.LastFetchedEpoch = &st.lastFetched
		}
		req.Partitions = append(req.Partitions, part)
	}
	if len(held) == 0 && len(req.Forgotten) == 0 {
		return nil, wait
	}
	if len(held) == 0 {
		req.MaxWaitMs = 0
	} else {
		req.MaxWaitMs = int32(wait / time.Millisecond)
	}
	return req, wait
}

// apply applies an answer's partitions, each under the role it was
// fetched for, by the rules of a unary fetch's answer (applyFetch,
// outOfRange); a refused partition backs off out of the session.
func (f *fetcher) apply(ans *sessionAnswer, held map[broker.TopicPartition]sentState) {
	m := f.m
	for i := range ans.parts {
		d := &ans.parts[i]
		sent, ok := held[d.tp]
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
		}
		f.mu.Lock()
		failed := p.failures > 0
		if err != nil {
			p.failures++
			p.retryAt = m.clock.Now().Add(retryBackoff(err, p.failures, m.cfg.FetchBackoff))
		} else {
			p.failures = 0
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
