package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// takeoverElectionTimeouts is how many raft election timeouts a leader
// keeps failing to take over before it hands leadership to another node:
// long enough to ride out a barrier or a commit that failed once, short
// enough that a node that cannot take over (a full disk, say) costs the
// cluster a few elections' worth of time without an active controller,
// not forever.
const takeoverElectionTimeouts = 5

// takeoverTiming returns, from raft's election timeout, the first wait
// between takeover attempts, the longest (the waits double), and how long
// takeover may keep failing before leadership is handed away.
func (c *Controller) takeoverTiming() (first, longest, giveUp time.Duration) {
	election := c.quorum.Timeouts().Election
	return max(election/10, time.Millisecond), election, takeoverElectionTimeouts * election
}

// leadership is one term of this node as raft leader: everything started for
// it hangs off its context and is waited for by revoke.
type leadership struct {
	c      *Controller
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	epoch  atomic.Int64 // set once established; a restore moves it on

	sessions *sessionTracker
	// reports are the replicas' logs brokers reported (recovery.go).
	reports *logReports

	shutdownMu sync.Mutex
	// shutdownAt is, per broker in controlled shutdown, the offset of the
	// batch that moved its leaderships away.
	shutdownAt map[int32]uint64

	mu     sync.Mutex // guards closed and sends on events
	closed bool
	events chan event

	// registerKick wakes registerControllers (features.go).
	registerKick chan struct{}

	// imageChecked is the latest comparison of the voters' image digests
	// (integrity.go); reportedImages, the voters whose difference was
	// logged in this term (checkImagesOnce's own).
	imageChecked   atomic.Pointer[imageCheck]
	reportedImages map[int32]bool

	// pushes shares the encoding of a push between the broker streams
	// (stream.go).
	pushes *pushCache
}

// event is one unit of work for the event loop: a decision to take and
// commit (decision, with its caller's ctx, and finish for the outcome), or
// anything else (run). abandon is called instead when the leadership ends
// before the event's turn comes.
type event struct {
	decision decision
	ctx      context.Context
	finish   func(index uint64, err error)

	run     func()
	abandon func(error)

	queued time.Time // when submit queued it: the event queue time metric
}

func (c *Controller) newLeadership() *leadership {
	ctx, cancel := context.WithCancel(context.Background())
	l := &leadership{c: c, log: c.log, ctx: ctx, cancel: cancel, events: make(chan event, c.cfg.EventQueueSize),
		sessions: newSessionTracker(c.cfg.SessionTimeout), shutdownAt: map[int32]uint64{}, reports: newLogReports(), registerKick: make(chan struct{}, 1),
		reportedImages: map[int32]bool{}, pushes: newPushCache(c.metrics)}
	l.wg.Add(1)
	return l
}

// run establishes the leadership, then runs the event loop until revoked.
func (l *leadership) run() {
	defer l.wg.Done()
	// However run ends, this leadership is no longer the active one: a
	// revoke that came during establish must not leave it marked active.
	defer l.c.active.CompareAndSwap(l, nil)
	start := time.Now()
	if d := l.c.fsm.Diverged(); d != nil {
		// Its image is not the quorum's: it never takes over (integrity.go).
		l.close()
		l.handAway(d.Reason)
		return
	}
	if err := l.establish(); err != nil {
		l.close()
		if d := l.c.fsm.Diverged(); d != nil {
			l.handAway(d.Reason)
		}
		return
	}
	// Every registered broker gets a fresh session before anyone can be
	// fenced; the fencer starts only now.
	l.sessions.reset(l.c.fsm.Image().Brokers(), l.c.cfg.Now())
	l.c.active.Store(l)
	l.log.Info("active controller", "epoch", l.epoch.Load(), "takeover", time.Since(start).Round(time.Millisecond))
	l.wg.Add(3)
	l.every(max(l.c.cfg.SessionTimeout/8, 10*time.Millisecond), l.fenceExpiredSessions)
	go l.electLeaderless()
	go l.registerControllers()
	go l.recoverFromLogs()
	if l.c.cfg.CrashGrace > 0 {
		l.wg.Add(1)
		go l.fenceCrashed()
	}
	if l.c.cfg.LeaderImbalanceCheckInterval > 0 {
		l.every(l.c.cfg.LeaderImbalanceCheckInterval, l.rebalanceLeaders)
	}
	if l.c.cfg.CompareImage != nil && l.c.cfg.ImageCheckInterval > 0 {
		l.every(l.c.cfg.ImageCheckInterval, l.checkImagesOnce)
	}
	l.eventLoop()
	l.close()
	if d := l.c.fsm.Diverged(); d != nil && l.ctx.Err() == nil {
		// The event loop stopped for it: no longer active, and raft
		// leadership goes to a voter whose image is the quorum's.
		l.c.active.CompareAndSwap(l, nil)
		l.log.Warn("no longer the active controller: this node's image diverged", "epoch", l.epoch.Load(), "index", d.Index)
		l.handAway(d.Reason)
	}
}

// establish makes this leader the active controller: the epoch record (and,
// on a new cluster, the cluster id), decided from a current image. It keeps
// trying, with backoff, for as long as this node leads: a leader that gave
// up would stay leader, never active, and every write would get ErrNotReady
// until something else ended its term. Once takeover has failed for
// takeoverElectionTimeouts election timeouts it also hands leadership away,
// since another node may succeed where this one cannot, and tries again
// after as long should the transfer fail. It returns nil once this node is
// active, and an error once the leadership has ended or been handed away.
func (l *leadership) establish() error {
	first, longest, giveUp := l.c.takeoverTiming()
	start := time.Now()
	transferAt := start.Add(giveUp)
	wait := first
	for attempt := 1; ; attempt++ {
		if d := l.c.fsm.Diverged(); d != nil {
			return fmt.Errorf("this node's image diverged at index %d: %s", d.Index, d.Reason)
		}
		err := l.tryEstablish()
		if err == nil || l.ctx.Err() != nil {
			return err
		}
		failing := time.Since(start).Round(time.Millisecond)
		l.log.Warn("takeover attempt failed", "attempt", attempt, "failing_for", failing, "err", err)
		if !time.Now().Before(transferAt) {
			l.log.Error("could not become the active controller; transferring leadership", "failing_for", failing, "err", err)
			_, terr := l.c.handOn(l.ctx, nil, true)
			if terr == nil {
				return fmt.Errorf("leadership handed away after %d takeover attempts: %w", attempt, err)
			}
			if l.ctx.Err() != nil {
				return l.ctx.Err()
			}
			l.log.Warn("leadership transfer failed; still trying to take over", "err", terr)
			transferAt = time.Now().Add(giveUp)
		}
		timer := time.NewTimer(wait)
		select {
		case <-l.ctx.Done():
			timer.Stop()
			return l.ctx.Err()
		case <-timer.C:
		}
		wait = min(2*wait, longest)
	}
}

func (l *leadership) tryEstablish() error {
	if fault := l.c.cfg.takeoverFault; fault != nil {
		if err := fault(); err != nil {
			return err
		}
	}
	// The takeover decides from the image (is there a cluster id yet? which
	// epoch is next? is this quorum empty, for a restore?), and a new
	// leader's state machine may not have applied every entry of earlier
	// terms: raft counts them committed only once an entry of the new term
	// is. The barrier waits for that, so that the takeover's batch is
	// decided on the committed image and the state machine never refuses
	// it (a whole cluster restarted on its data dirs would otherwise write
	// a second cluster id, which every node refuses).
	asked := l.askVoters() // beside the barrier, for the registrations (features.go)
	if err := l.c.quorum.Barrier(l.c.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	img := l.c.fsm.Image()
	if l.c.cfg.RestoreFrom != "" && img.ClusterID == "" && img.ControllerEpoch == 0 {
		// A new quorum started from a backup: the snapshot brings the
		// cluster id, the metadata and the epoch, and the epoch after it is
		// this controller's.
		if _, err := l.restore(l.c.cfg.RestoreFrom, false, true); err != nil {
			return fmt.Errorf("restore from %s: %w", l.c.cfg.RestoreFrom, err)
		}
		return nil
	}
	var records []*keelpb.Record
	if img.ClusterID == "" {
		records = append(records, &keelpb.Record{Record: &keelpb.Record_ClusterId{
			ClusterId: &keelpb.ClusterIdRecord{ClusterId: l.c.newClusterID()}}})
	}
	if img.MetadataVersion == 0 {
		// A new cluster starts at the level it was configured with; a
		// cluster whose log states none (from before FeatureLevel records)
		// gets the level such a log is read at.
		level := fsm.BootstrapMetadataVersion
		if img.ClusterID == "" {
			level = l.c.cfg.InitialMetadataVersion
		}
		records = append(records, &keelpb.Record{Record: &keelpb.Record_FeatureLevel{
			FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: level}}})
	}
	next := img.ControllerEpoch + 1
	records = append(records, &keelpb.Record{Record: &keelpb.Record_ControllerEpoch{
		ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: next, LeaderId: l.c.cfg.NodeID}}})
	records = append(records, l.takeoverRegistrations(img, asked)...)
	// Checked as every decision is (speculate): a takeover whose batch the
	// FSM would refuse writes nothing, rather than an entry every node
	// refuses and stops acting on its image for (integrity.go).
	if _, err := speculate(img, l.c.quorum.LastIndex()+1, l.c.quorum.CurrentTerm(), splitRecords(records, MaxEntryBytes)); err != nil {
		return fmt.Errorf("controller epoch %d: %w", next, err)
	}
	if _, err := l.c.commitBatch(records...); err != nil {
		return fmt.Errorf("commit controller epoch %d: %w", next, err)
	}
	l.epoch.Store(next)
	return nil
}

// eventLoop runs queued events in order until the leadership is revoked.
// Decisions are pipelined (pipeline, in group.go): each is taken on the
// image the decisions before it leave and handed to raft without waiting,
// and answerFlights answers each caller once its own entries commit. A run
// event runs alone, once everything before it has committed. Before it
// returns, every decision it took has been answered.
func (l *leadership) eventLoop() {
	// A node whose image diverged decides nothing more (integrity.go).
	diverged := l.c.fsm.DivergedCh()
	p := newPipeline()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		l.answerFlights(p.flights, p.landed)
	}()
	defer func() {
		// The entries in flight resolve on their own (they commit, or raft
		// fails them as it steps down): wait for their answers.
		close(p.flights)
		for {
			select {
			case <-answered:
				// What is offered and not yet applied will not be
				// applied as offered by this leadership: let its images go.
				l.c.fsm.DropOffers()
				return
			case <-p.landed:
			}
		}
	}()
	for {
		if len(l.events) == 0 || p.broken || p.full() {
			// Nothing to decide next (or nothing may be): confirm the
			// decisions that wrote nothing. While events are queued, the
			// ones that wrote nothing wait for those, which may write.
			l.confirm(p)
		}
		if p.broken || p.full() {
			// Nothing more is decided until a flight lands: the window is
			// full, or a failed entry left the speculative image in doubt
			// until all have.
			select {
			case <-l.ctx.Done():
				return
			case <-diverged:
				return
			case ld := <-p.landed:
				p.land(ld)
			}
			continue
		}
		select {
		case <-l.ctx.Done():
			return
		case <-diverged:
			return
		case ld := <-p.landed:
			p.land(ld)
		case ev := <-l.events:
			l.taken(ev)
			// What has landed counts before the event: a caller that saw
			// its answer and queued another event finds the loop knowing
			// of it (the answerer tells the loop before the caller).
			p.landQueued()
			if ev.decision == nil || p.broken {
				// A run event runs alone, on the committed image; after a
				// failed entry, nothing is decided until all have landed.
				if !l.drain(p) {
					ev.abandon(l.c.notLeader())
					return
				}
			}
			if ev.decision == nil {
				ev.run()
				continue
			}
			l.take(p, ev)
		}
	}
}

// taken records how long ev waited in the queue.
func (l *leadership) taken(ev event) {
	l.c.metrics.eventQueueTime.Observe(time.Since(ev.queued).Seconds())
}

// close refuses further events and abandons the queued ones, so that no
// caller waits for an event loop that has stopped.
func (l *leadership) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	for {
		select {
		case ev := <-l.events:
			ev.abandon(l.c.notLeader())
		default:
			return
		}
	}
}

// submit queues ev on the event loop without blocking.
func (l *leadership) submit(ctx context.Context, ev event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.ctx.Err() != nil {
		return l.c.notLeader()
	}
	ev.queued = time.Now()
	select {
	case l.events <- ev:
		return nil
	default:
		return ErrQueueFull
	}
}

// decide queues d on the event loop and waits for its outcome.
func (l *leadership) decide(ctx context.Context, d decision) (uint64, error) {
	wait, err := l.queue(ctx, d)
	if err != nil {
		return 0, err
	}
	return wait()
}

// queue puts d on the event loop, behind every event queued before it, and
// returns the wait for its outcome: decide in two steps, so that a caller
// (the group-commit test) can queue several decisions in a known order.
func (l *leadership) queue(ctx context.Context, d decision) (wait func() (uint64, error), err error) {
	type result struct {
		index uint64
		err   error
	}
	done := make(chan result, 1)
	finish := func(index uint64, err error) { done <- result{index, err} }
	err = l.submit(ctx, event{
		decision: d, ctx: ctx, finish: finish,
		abandon: func(err error) { finish(0, err) },
	})
	if err != nil {
		return nil, err
	}
	return func() (uint64, error) {
		select {
		case r := <-done:
			return r.index, r.err
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%v)", ErrOutcomeUnknown, ctx.Err())
		}
	}, nil
}

// every calls fn every interval, on a goroutine of the leadership's own,
// until the leadership ends.
func (l *leadership) every(interval time.Duration, fn func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-l.ctx.Done():
				return
			case <-tick.C:
			}
			fn()
		}
	}()
}

// fenceExpiredSessions fences every active broker whose session has run
// out, one broker per decision, the longest silent first (Kafka's
// maybeFenceOneStaleBroker): each fencing is decided on the image the one
// before it leaves, so when several members of an ISR expire together,
// leadership and the last ISR place go, step by step, to the member heard
// from last, not to whichever a single decision happened to visit first.
// The decisions are queued together, so they still commit in one raft
// round. It checks several times per session timeout so a dead broker is
// fenced soon after its session ends.
func (l *leadership) fenceExpiredSessions() {
	n := len(l.sessions.expired(l.c.fsm.Image(), l.c.cfg.Now()))
	waits := make([]func() (uint64, error), 0, n)
	for range n {
		wait, err := l.queue(l.ctx, l.fenceOneExpired)
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Warn("fencing expired brokers failed", "err", err)
			}
			break
		}
		waits = append(waits, wait)
	}
	for _, wait := range waits {
		index, err := wait()
		if err != nil && l.ctx.Err() == nil {
			l.log.Warn("fencing an expired broker failed", "err", err)
		}
		if err == nil && index > 0 {
			l.c.metrics.fenced.WithLabelValues(FenceCauseSessionExpired).Inc()
		}
	}
}

// fenceOneExpired decides the fencing of the broker silent the longest, if
// any session has run out: decided on the loop, since a heartbeat may have
// come meanwhile.
func (l *leadership) fenceOneExpired(img *fsm.Image) ([]*keelpb.Record, error) {
	b, ok := l.sessions.oldestExpired(img, l.c.cfg.Now())
	if !ok {
		return nil, nil
	}
	l.log.Info("fencing broker: session expired", "broker_id", b.ID, "broker_epoch", b.Epoch)
	return fenceRecords(img, []*fsm.Broker{b}), nil
}

// revoke stops the leadership and waits until all it started has stopped.
func (l *leadership) revoke() {
	l.c.active.CompareAndSwap(l, nil)
	l.cancel()
	l.wg.Wait()
	l.pushes.close()
	if l.epoch.Load() > 0 {
		l.log.Info("no longer the active controller", "epoch", l.epoch.Load())
	}
}

func (l *leadership) noteShutdown(broker int32, offset uint64) {
	l.shutdownMu.Lock()
	defer l.shutdownMu.Unlock()
	l.shutdownAt[broker] = offset
}

// shutdownOffset is the offset every active broker must have applied before
// broker may finish its controlled shutdown. A controller that did not see
// the shutdown begin (it took over since) uses the image it first answers
// from: conservative, since that holds the moves.
func (l *leadership) shutdownOffset(broker int32, current uint64) uint64 {
	l.shutdownMu.Lock()
	defer l.shutdownMu.Unlock()
	off, ok := l.shutdownAt[broker]
	if !ok {
		off = current
		l.shutdownAt[broker] = off
	}
	return off
}

// electLeaderless runs leaderlessChanges once, after the takeover and off
// its critical path.
func (l *leadership) electLeaderless() {
	defer l.wg.Done()
	index, err := l.decide(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return leaderlessChanges(img), nil
	})
	switch {
	case err != nil && l.ctx.Err() == nil:
		l.log.Warn("electing leaders for leaderless partitions failed", "err", err)
	case index > 0:
		l.log.Info("elected leaders for leaderless partitions", "index", index)
	}
}
