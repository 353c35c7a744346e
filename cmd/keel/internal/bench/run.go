package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// Defaults of the command's flags.
const (
	DefaultPartitions      = 100_000
	DefaultBrokers         = 100
	DefaultFullBrokers     = 1
	DefaultRuns            = 3
	DefaultHeartbeatWindow = 10 * time.Second
	DefaultSteadyDuration  = 10 * time.Minute
	// DefaultPerTopic is the largest topic the bench creates.
	DefaultPerTopic = 10_000
	// DefaultCreateConcurrency is how many CreateTopic requests are in
	// flight at once: enough that the controller always has the next
	// decision queued while one commits.
	DefaultCreateConcurrency = 4
	// DefaultCeilingEntries is how many 1,000-record entries the raw raft
	// measurement commits.
	DefaultCeilingEntries = 300
	// ceilingAttempts is how many times the raw raft measurement is
	// taken when its leader loses leadership in the middle.
	ceilingAttempts = 3
)

// Config configures a bench.
type Config struct {
	// Scenarios to run (ParseScenarios); they run in AllScenarios order.
	Scenarios []string
	// Partitions is P: the partitions created (RF 3) and loaded.
	Partitions int
	// Brokers is B: the simulated brokers, FullBrokers of them full (a
	// broker.Agent replaying the image), the rest thin.
	Brokers     int
	FullBrokers int
	// Runs of each scenario; the report gives the median and max over them.
	Runs int
	// Controllers are the addresses of a running quorum to bench; empty
	// starts a local quorum of three `Executable controller` processes.
	Controllers []string
	Executable  string
	// Env is added to the local controllers' environment.
	Env []string
	// HeartbeatWindow is how long each heartbeats run measures.
	HeartbeatWindow time.Duration
	// HeartbeatInterval is the brokers' heartbeat interval (default
	// broker.DefaultHeartbeatInterval, KRaft's 2 s).
	HeartbeatInterval time.Duration
	PerTopic          int
	CreateConcurrency int
	CeilingEntries    int
	// SteadyDuration is how long each steady run lasts (10 minutes), with
	// a write every SteadyWriteInterval (50 ms).
	SteadyDuration      time.Duration
	SteadyWriteInterval time.Duration
	// Progress, when set (a terminal), gets progress bars on long phases.
	Progress io.Writer
	// Status, when set, gets one line as each phase starts.
	Status io.Writer
	// Data configures the data path's scenarios (produce, leader-crash,
	// catch-up).
	Data DataConfig
	// Logger gets the simulated brokers' logs; nil discards them.
	Logger *slog.Logger
	// TLS, with Controllers, is the mutual TLS to reach them with: the
	// admin client and every simulated broker present its certificate,
	// which must be an admin's (an admin may act for any broker id). Nil is
	// plaintext.
	TLS *tlsauth.Config
}

func (c *Config) check() error {
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Brokers == 0 {
		c.Brokers = DefaultBrokers
	}
	if c.Runs == 0 {
		c.Runs = DefaultRuns
	}
	if c.HeartbeatWindow == 0 {
		c.HeartbeatWindow = DefaultHeartbeatWindow
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = broker.DefaultHeartbeatInterval
	}
	if c.PerTopic == 0 {
		c.PerTopic = DefaultPerTopic
	}
	if c.CreateConcurrency == 0 {
		c.CreateConcurrency = DefaultCreateConcurrency
	}
	if c.CeilingEntries == 0 {
		c.CeilingEntries = DefaultCeilingEntries
	}
	if c.SteadyDuration == 0 {
		c.SteadyDuration = DefaultSteadyDuration
	}
	if c.SteadyWriteInterval == 0 {
		c.SteadyWriteInterval = 50 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = slices.Clone(AllScenarios)
	}
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("--partitions %d: at least 1", c.Partitions)
	case c.Brokers < 3:
		return fmt.Errorf("--brokers %d: at least 3 (partitions have 3 replicas)", c.Brokers)
	case c.FullBrokers < 0 || c.FullBrokers > c.Brokers-2:
		return fmt.Errorf("--full-brokers %d: between 0 and --brokers - 2 (%d): the scenarios stop thin brokers and watch from another", c.FullBrokers, c.Brokers-2)
	case c.Runs < 1:
		return fmt.Errorf("--runs %d: at least 1", c.Runs)
	case c.HeartbeatWindow < 0 || c.HeartbeatInterval < 0:
		return errors.New("the heartbeat window and interval must be positive")
	case len(c.Controllers) == 0 && c.Executable == "":
		return errors.New("no keel executable to start controllers with")
	case len(c.Controllers) == 0 && c.TLS != nil:
		return errors.New("--tls-cert, --tls-key and --tls-ca apply to a running quorum (--controllers); the local quorum runs in plaintext")
	}
	return c.Data.check()
}

// simBroker is a simulated broker of either kind.
type simBroker interface {
	ID() int32
	Kind() string
	// Offset is the highest metadata offset the broker has received (thin)
	// or applied (full).
	Offset() uint64
	// ReachedAt is when it first had offset or a later one.
	ReachedAt(offset uint64) (time.Time, bool)
	SnapshotsSince(t time.Time) int
	Epoch() int64
	Close()
}

type runner struct {
	cfg    Config
	dir    string
	quorum *keelproc.Cluster // nil against a running quorum
	addrs  []string
	admin  *rpc.Client
	hb     *latencies
	prog   progress
	// meters measure each scenario's CPU and scheduling gaps.
	meters *meters

	brokers []simBroker // by id order
	prefix  string      // of every topic the bench creates
	created []string    // every topic created and not deleted
	dataset []string    // the topics holding the P partitions
	ceiling Ceiling
	// timeout bounds any one wait; it grows with P.
	timeout time.Duration
}

// Run runs the bench: the raw raft ceiling first, then a quorum (started,
// or the one at cfg.Controllers), the simulated brokers, and every
// scenario asked for. Everything it started is stopped before it returns,
// also on error or when ctx ends; a local quorum's data is removed.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "keel-bench-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if os.Getenv("KEEL_BENCH_KEEP") == "" {
			os.RemoveAll(dir)
		}
	}()
	var tag [3]byte
	_, _ = rand.Read(tag[:])
	r := &runner{
		cfg:     cfg,
		dir:     dir,
		hb:      &latencies{},
		prog:    progress{cfg.Progress},
		prefix:  "bench-" + hex.EncodeToString(tag[:]),
		timeout: 2*time.Minute + time.Duration(cfg.Partitions/1000)*time.Second,
	}
	defer r.close()
	r.meters = newMeters()
	defer r.meters.close()
	report := &Report{}
	statusf(cfg.Status, "the machine's baseline: scheduling gaps over %v idle", idleBaseline)
	report.setIdle(r.meters.gaps.idle(ctx, idleBaseline))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	var todo, data []string
	for _, s := range cfg.Scenarios {
		if dataScenarios[s] {
			if len(cfg.Controllers) > 0 {
				report.Skipped = append(report.Skipped, Skipped{Name: s,
					Reason: "it starts broker processes of its own, which a bench of a running quorum (--controllers) does not do"})
				continue
			}
			data = append(data, s)
			continue
		}
		if len(cfg.Controllers) > 0 && killsControllers[s] {
			report.Skipped = append(report.Skipped, Skipped{Name: s,
				Reason: "it kills and restarts controllers, which a bench of a running quorum (--controllers) does not do"})
			continue
		}
		todo = append(todo, s)
	}
	// The data path has ceilings of its own (its produce scenario
	// measures them): with only its scenarios, no raw raft ceiling.
	if len(todo) == 0 && len(data) > 0 {
		return r.finish(ctx, report, data)
	}

	statusf(cfg.Status, "raw hashicorp/raft ceiling: 3 in-process nodes committing %d entries of %d Partition records, one at a time and pipelined", cfg.CeilingEntries, CeilingRecordsPerEntry)
	sp := r.prog.start(-1, "raw raft ceiling")
	// An election in the middle (a stall of a loaded machine longer than
	// the 300 ms timeouts) voids a measurement: it is taken again, from
	// scratch, up to ceilingAttempts times in all.
	for attempt := 1; ; attempt++ {
		r.ceiling, err = MeasureRaftCeiling(ctx, filepath.Join(dir, fmt.Sprintf("ceiling-%d", attempt)), cfg.CeilingEntries)
		if !(errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader)) || attempt == ceilingAttempts || ctx.Err() != nil {
			break
		}
		statusf(cfg.Status, "raw raft ceiling: %v; measuring it again", err)
	}
	sp.done()
	if err != nil {
		return nil, r.withLogs(ctx, fmt.Errorf("raw raft ceiling: %w", err))
	}
	report.RaftCeilingRecordsPerS = round(r.ceiling.RecordsPerS)
	report.RaftPipelinedRecordsPerS = round(r.ceiling.PipelinedRecordsPerS)
	if len(todo) == 0 {
		return r.finish(ctx, report, data)
	}

	if err := r.startQuorum(ctx); err != nil {
		return nil, r.withLogs(ctx, err)
	}
	if err := r.startBrokers(ctx); err != nil {
		return nil, r.withLogs(ctx, err)
	}
	for _, s := range todo {
		res, err := r.scenario(ctx, s)
		if err != nil {
			return nil, r.withLogs(ctx, fmt.Errorf("%s: %w", s, err))
		}
		report.Scenarios = append(report.Scenarios, res)
	}
	return r.finish(ctx, report, data)
}

// finish runs the data path's scenarios, then checks the targets.
func (r *runner) finish(ctx context.Context, report *Report, data []string) (*Report, error) {
	report, err := r.dataPath(ctx, report, data)
	if err != nil {
		return nil, err
	}
	report.Targets = CheckTargets(report)
	return report, nil
}

// withLogs adds the end of the local controllers' logs to an error; an
// error caused by ctx ending is only that.
func (r *runner) withLogs(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	if r.quorum == nil {
		return err
	}
	return fmt.Errorf("%w\n%s", err, quorumLogs(r.quorum, 10))
}

func (r *runner) scenario(ctx context.Context, name string) (Result, error) {
	switch name {
	case ScenarioCreate:
		return r.create(ctx)
	case ScenarioHeartbeats:
		return r.heartbeats(ctx)
	case ScenarioBrokerFailure:
		return r.brokerFailure(ctx)
	case ScenarioBrokerCrash:
		return r.brokerCrash(ctx)
	case ScenarioControlledShutdown:
		return r.controlledShutdown(ctx)
	case ScenarioFailover:
		return r.failover(ctx)
	case ScenarioLoad:
		return r.load(ctx)
	case ScenarioSteady:
		return r.steady(ctx)
	}
	return Result{}, fmt.Errorf("unknown scenario %q", name)
}

// close stops every broker (all at once) and controller; against a running
// quorum it then removes what the bench added (its topics, its brokers).
func (r *runner) close() {
	var wg sync.WaitGroup
	for _, b := range r.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Close()
		}()
	}
	wg.Wait()
	if r.quorum == nil && r.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for _, t := range r.created {
			if err := r.admin.DeleteTopic(ctx, t); err != nil && status.Code(err) != codes.NotFound {
				statusf(r.cfg.Status, "could not delete topic %s: %v", t, err)
			}
		}
		for _, b := range r.brokers {
			if e := b.Epoch(); e > 0 {
				r.removeBroker(ctx, b.ID(), e)
			}
		}
		cancel()
	}
	if r.admin != nil {
		r.admin.Close()
	}
	if r.quorum != nil {
		// SIGKILL, not Close's SIGTERM: nothing the bench reports needs a
		// graceful stop, and controllers handing leadership around on the
		// way out would only delay the exit.
		_ = r.kill(r.quorum.Controllers()...)
		_ = r.quorum.Close()
	}
}

// removeBroker takes a bench broker that has stopped out of a running
// quorum: fenced at once (a heartbeat asking for it, in the broker's name,
// rather than wait for its session to end), then unregistered, which only a
// fenced broker may be.
func (r *runner) removeBroker(ctx context.Context, id int32, epoch int64) {
	_, err := r.admin.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: epoch, WantFence: true})
	if err == nil {
		_, err = r.admin.UnregisterBroker(ctx, &keelpb.UnregisterBrokerRequest{BrokerId: id, BrokerEpoch: epoch})
	}
	switch {
	case err == nil, rpc.ReasonOf(err) == rpc.ReasonStaleBrokerEpoch, rpc.ReasonOf(err) == rpc.ReasonBrokerNotRegistered:
	default:
		statusf(r.cfg.Status, "could not unregister broker %d: %s", id, status.Convert(err).Message())
	}
}

func (r *runner) startQuorum(ctx context.Context) error {
	if len(r.cfg.Controllers) > 0 {
		return r.connect(ctx, r.cfg.Controllers)
	}
	statusf(r.cfg.Status, "starting 3 controllers (%s controller) on loopback", r.cfg.Executable)
	q, err := keelproc.New(keelproc.Config{
		Keel:            r.cfg.Executable,
		Dir:             filepath.Join(r.dir, "quorum"),
		Controllers:     3,
		Env:             r.cfg.Env,
		ControllerFlags: controllerFlags,
		Metrics:         true, // the load scenario reads each controller's memory
		// The ports are found free and then bound by the controllers:
		// another process may take one in between. Then the quorum starts
		// again on other ports, three times in all.
		Attempts: 3,
		Retrying: func(error) {
			statusf(r.cfg.Status, "a controller's port was taken; starting the quorum again on other ports")
		},
		// A restarted controller says it has started once it has loaded
		// its snapshot: as long as any wait of the bench may take.
		StartTimeout: r.timeout,
	})
	if err != nil {
		return err
	}
	r.quorum = q
	r.meters.watch(q)
	if err := q.Start(ctx); err != nil {
		return err
	}
	return r.connect(ctx, q.Addrs())
}

// kill sends kill -9 to the controllers that are running and waits until
// they have exited; one that has exited already is left alone, as
// activeQuorum reports it where that matters.
func (r *runner) kill(nodes ...*keelproc.Node) error {
	nodes = slices.DeleteFunc(nodes, func(nd *keelproc.Node) bool { return !nd.Running() })
	return r.quorum.Kill(nodes...)
}

// connect makes the admin client for the controllers at addrs and waits
// for an active controller.
func (r *runner) connect(ctx context.Context, addrs []string) error {
	r.addrs = addrs
	admin, err := rpc.NewClient(addrs, rpc.WithTLS(r.cfg.TLS))
	if err != nil {
		return err
	}
	r.admin = admin
	_, err = r.waitActive(ctx, time.Minute)
	return err
}

// waitActive waits until a controller is active and returns its view.
func (r *runner) waitActive(ctx context.Context, timeout time.Duration) (*keelpb.DescribeQuorumResponse, error) {
	var leader *keelpb.DescribeQuorumResponse
	err := poll.Wait(ctx, timeout, 20*time.Millisecond, "an active controller", func() (bool, error) {
		v, err := r.activeQuorum(ctx)
		if v == nil || err != nil {
			return false, err
		}
		leader = v.Leader
		return true, nil
	})
	return leader, err
}

// activeQuorum asks every controller for its view. It fails when a
// controller process the bench started has exited, and returns nil while no
// controller is active or none answers.
func (r *runner) activeQuorum(ctx context.Context) (*rpc.QuorumView, error) {
	if r.quorum != nil {
		for _, nd := range r.quorum.Controllers() {
			if !nd.Running() {
				return nil, fmt.Errorf("controller %d exited", nd.ID())
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := r.admin.DescribeQuorum(cctx)
	if err != nil || !v.Leader.GetActive() {
		return nil, nil
	}
	return v, nil
}

// appliedBy reports whether every one of want voters answered in v and has
// applied index.
func appliedBy(v *rpc.QuorumView, want int, index uint64) bool {
	if len(v.Nodes) < want {
		return false
	}
	for _, n := range v.Nodes {
		if n.GetAppliedIndex() < index {
			return false
		}
	}
	return true
}

func rackOf(id int32) string { return fmt.Sprintf("r%d", id%3) }

// startBrokers starts the simulated brokers and waits until every one is
// registered and active.
func (r *runner) startBrokers(ctx context.Context) error {
	first := int32(1)
	if r.quorum == nil {
		// Against a running quorum: ids above every registered broker's.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := r.admin.ListBrokers(cctx)
		cancel()
		if err != nil {
			return err
		}
		for _, b := range resp.GetBrokers() {
			first = max(first, b.GetId()+1)
		}
	}
	statusf(r.cfg.Status, "starting %d brokers (%d full, %d thin), ids %d-%d", r.cfg.Brokers, r.cfg.FullBrokers,
		r.cfg.Brokers-r.cfg.FullBrokers, first, first+int32(r.cfg.Brokers)-1)
	for i := range r.cfg.Brokers {
		id := first + int32(i)
		var b simBroker
		var err error
		if i < r.cfg.FullBrokers {
			b, err = startFullBroker(id, rackOf(id), filepath.Join(r.dir, fmt.Sprintf("broker-%d", id)), r.addrs, r.cfg.TLS, r.cfg.Logger)
		} else {
			b, err = r.startThin(id)
		}
		if err != nil {
			return fmt.Errorf("start broker %d: %w", id, err)
		}
		r.brokers = append(r.brokers, b)
	}
	return r.waitActiveBrokers(ctx, r.brokers)
}

func (r *runner) startThin(id int32) (*thinBroker, error) {
	return startThinBroker(id, rackOf(id), r.addrs, r.cfg.HeartbeatInterval, r.hb, r.cfg.Logger, rpc.WithTLS(r.cfg.TLS))
}

// waitActiveBrokers waits until the controllers list every one of bs as
// active with its current epoch.
func (r *runner) waitActiveBrokers(ctx context.Context, bs []simBroker) error {
	desc := ""
	if len(bs) > 1 {
		desc = "brokers active"
	}
	bar := r.prog.start(int64(len(bs)), desc)
	defer bar.done()
	return poll.Wait(ctx, r.timeout, 50*time.Millisecond, "every broker registered and active", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := r.admin.ListBrokers(cctx)
		if err != nil {
			return false, nil
		}
		state := map[int32]*keelpb.BrokerInfo{}
		for _, b := range resp.GetBrokers() {
			state[b.GetId()] = b
		}
		n := 0
		for _, b := range bs {
			if s := state[b.ID()]; s != nil && s.GetState() == fsm.BrokerActive && s.GetEpoch() == b.Epoch() {
				n++
			}
		}
		bar.set(n)
		return n == len(bs), nil
	})
}

// live returns the brokers other than except.
func (r *runner) live(except int32) []simBroker {
	return slices.DeleteFunc(slices.Clone(r.brokers), func(b simBroker) bool { return b.ID() == except })
}

// thin returns the thin brokers other than except.
func (r *runner) thin(except int32) []*thinBroker {
	var out []*thinBroker
	for _, b := range r.brokers {
		if t, ok := b.(*thinBroker); ok && t.ID() != except {
			out = append(out, t)
		}
	}
	return out
}

// observer is a thin broker other than except, to watch the stream with.
func (r *runner) observer(except int32) *thinBroker { return r.thin(except)[0] }

// replace puts a new broker in place of the one with id (stopped).
func (r *runner) replace(ctx context.Context, id int32) error {
	nb, err := r.startThin(id)
	if err != nil {
		return err
	}
	for i, b := range r.brokers {
		if b.ID() == id {
			r.brokers[i] = nb
		}
	}
	return r.waitActiveBrokers(ctx, []simBroker{nb})
}

// waitOffset waits until every broker of bs has offset; what names the
// wait (and its progress bar, if not empty).
func (r *runner) waitOffset(ctx context.Context, bs []simBroker, offset uint64, what string) error {
	bar := r.prog.start(int64(len(bs)), what)
	defer bar.done()
	return poll.Wait(ctx, r.timeout, 5*time.Millisecond, cmp.Or(what, "every broker to catch up"), func() (bool, error) {
		n := 0
		for _, b := range bs {
			if b.Offset() >= offset {
				n++
			}
		}
		bar.set(n)
		return n == len(bs), nil
	})
}

// barrier commits a no-op and waits until every broker has it: the cluster
// is quiet and every broker current. It returns the no-op's offset.
func (r *runner) barrier(ctx context.Context) (uint64, error) { return r.barrierShown(ctx, "") }

// barrierShown is barrier with a progress bar called desc on the wait.
func (r *runner) barrierShown(ctx context.Context, desc string) (uint64, error) {
	var resp *keelpb.AppendNoOpResponse
	err := poll.Wait(ctx, r.timeout, 50*time.Millisecond, "a no-op to commit", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		resp, err = r.admin.AppendNoOp(cctx, "")
		return err == nil, nil
	})
	if err != nil {
		return 0, err
	}
	return resp.GetIndex(), r.waitOffset(ctx, r.brokers, resp.GetIndex(), desc)
}

// reached returns the earliest and the latest time at which the brokers bs
// first had offset.
func reached(bs []simBroker, offset uint64) (first, last time.Time, err error) {
	for _, b := range bs {
		t, ok := b.ReachedAt(offset)
		if !ok {
			return first, last, fmt.Errorf("broker %d has not reached offset %d", b.ID(), offset)
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last, nil
}

// topicSizes splits P partitions into topics of at most PerTopic.
func topicSizes(total, perTopic int) []int {
	var out []int
	for n := 0; n < total; n += perTopic {
		out = append(out, min(perTopic, total-n))
	}
	return out
}

// createTopics creates topics names[i] of sizes[i] partitions (RF 3),
// concurrency requests at once, and returns when the last is committed.
func (r *runner) createTopics(ctx context.Context, names []string, sizes []int, desc string) error {
	total := 0
	for _, s := range sizes {
		total += s
	}
	bar := r.prog.start(int64(total), desc)
	defer bar.done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range r.cfg.CreateConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cctx, ccancel := context.WithTimeout(ctx, r.timeout)
				_, err := r.admin.CreateTopic(cctx, &keelpb.CreateTopicRequest{Name: names[i], Partitions: int32(sizes[i]), ReplicationFactor: 3})
				ccancel()
				if status.Code(err) == codes.AlreadyExists {
					err = nil // a retry after a leadership change whose first try committed
				}
				if err != nil {
					errs <- fmt.Errorf("create topic %s: %w", names[i], err)
					cancel()
					continue
				}
				bar.add(sizes[i])
			}
		}()
	}
	for i := range names {
		select {
		case work <- i:
			r.created = append(r.created, names[i])
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// deleteTopics deletes topics the bench created.
func (r *runner) deleteTopics(ctx context.Context, names []string) error {
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := r.admin.DeleteTopic(cctx, n)
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("delete topic %s: %w", n, err)
		}
		r.created = slices.DeleteFunc(r.created, func(c string) bool { return c == n })
	}
	return nil
}

// ensureDataset creates the P partitions when no create run left them.
func (r *runner) ensureDataset(ctx context.Context) error {
	if r.dataset != nil {
		return nil
	}
	sizes := topicSizes(r.cfg.Partitions, r.cfg.PerTopic)
	names := make([]string, len(sizes))
	for i := range names {
		names[i] = fmt.Sprintf("%s-d-%d", r.prefix, i)
	}
	statusf(r.cfg.Status, "creating %d partitions in %d topics to run on", r.cfg.Partitions, len(names))
	if err := r.createTopics(ctx, names, sizes, "creating partitions"); err != nil {
		return err
	}
	r.dataset = names
	_, err := r.barrierShown(ctx, "brokers applying the partitions")
	return err
}

// partitions is how many partitions the bench's dataset holds.
func (r *runner) partitions() int {
	if r.dataset == nil {
		return 0
	}
	return r.cfg.Partitions
}

// leaders reads who leads each partition of the dataset.
func (r *runner) leaders(ctx context.Context) (map[int32][]partKey, error) {
	out := map[int32][]partKey{}
	for _, name := range r.dataset {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := r.admin.DescribeTopic(cctx, name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("describe topic %s: %w", name, err)
		}
		id, err := fsm.ParseTopicID(resp.GetTopic().GetId())
		if err != nil {
			return nil, err
		}
		for _, p := range resp.GetTopic().GetPartitions() {
			out[p.GetLeader()] = append(out[p.GetLeader()], partKey{id, p.GetPartition()})
		}
	}
	return out, nil
}

// busiestThin is the thin broker leading the most partitions (the lowest
// id among equals) and what it leads.
func (r *runner) busiestThin(leaders map[int32][]partKey) (*thinBroker, []partKey) {
	var best *thinBroker
	for _, t := range r.thin(-1) {
		if best == nil || len(leaders[t.ID()]) > len(leaders[best.ID()]) {
			best = t
		}
	}
	return best, leaders[best.ID()]
}
