package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/broker/node"
	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/atomicfile"
	"github.com/keel-dev/keel/internal/hostport"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
	"github.com/keel-dev/keel/tlsauth"
)

func newDevCmd(g *globalFlags) *cobra.Command {
	var dataDir string
	var controllers, brokers, basePort int
	var useTLS, useMetrics, usePprof bool
	timing := raftlog.DefaultTiming()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster in one process (temporary data; Ctrl-C stops it)",
		Long: `Run a local controller quorum and brokers in one process on loopback ports,
with their data in a temporary directory that is removed on exit (or in
--data-dir, kept). Ctrl-C stops the brokers (each with a controlled shutdown),
then the controllers.

The ports follow one layout from --base-port (9092): the brokers' Kafka
listeners at 9092, 9093, ... (Kafka's port, as clients expect), the
controllers at 9192, ... (the admin commands' default --controllers), the
brokers at 9292, ..., and with --metrics the controllers' metrics at 9392, ...
and the brokers' at 9492, .... A port that is taken moves to a free one, and
the banner says which. --base-port 0 takes free ports throughout.

Run again with the same --data-dir, it starts the same cluster on the same
addresses, every listener's (saved in DATA/dev.json; the controllers' are in
raft's configuration too). It refuses, in one line, if one is taken.

With --tls, everything runs over mutual TLS with certificates from a
throwaway CA written to DATA/tls: controller-N, broker-N and admin. It prints
the flags that reach the cluster with the admin certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if controllers != 1 && controllers != 3 && controllers != 5 {
				return fmt.Errorf("--controllers-count %d: want 1, 3 or 5", controllers)
			}
			if brokers < 0 {
				return fmt.Errorf("--brokers-count %d: want 0 or more", brokers)
			}
			if err := checkDevBasePort(basePort, brokers); err != nil {
				return err
			}
			if usePprof && !useMetrics {
				return errors.New("--pprof serves the profiler on each node's metrics listener, which --metrics=false turns off")
			}
			if cert, key, ca := tlsFlagValues(cmd); cert != "" || key != "" || ca != "" {
				return errors.New("keel dev makes its own certificates: use --tls, not --tls-cert, --tls-key or --tls-ca")
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			if dataDir == "" {
				if dataDir, err = os.MkdirTemp("", "keel-dev-"); err != nil {
					return err
				}
				defer os.RemoveAll(dataDir)
			}
			if dataDir, err = filepath.Abs(dataDir); err != nil {
				return err
			}
			// A data dir that held a dev cluster restarts it where it was:
			// raft's configuration names the controllers' old addresses,
			// and the user's shell the others.
			saved, err := loadDevState(dataDir)
			if err != nil {
				return err
			}
			if saved != nil {
				if cmd.Flags().Changed("controllers-count") && controllers != len(saved.Controllers) {
					return fmt.Errorf("--controllers-count %d: the dev cluster in %s has %d controllers (%s); give another --data-dir for a new cluster",
						controllers, dataDir, len(saved.Controllers), devStateFile)
				}
				controllers = len(saved.Controllers)
			}
			slots := devSlots(controllers, brokers, useMetrics)
			statePath := filepath.Join(dataDir, devStateFile)
			plan, err := planDevAddrs(slots, saved.slots(), basePort, devPortInUse, statePath)
			if err != nil {
				return err
			}
			listen := make([]string, controllers)
			metricsAddrs := make([]string, controllers+brokers)
			for s, addr := range plan.addrs {
				switch s.role {
				case devController:
					listen[s.id-1] = addr
				case devControllerMetrics:
					metricsAddrs[s.id-1] = addr
				case devBrokerMetrics:
					metricsAddrs[controllers+int(s.id)-1] = addr
				}
			}
			// Catch Ctrl-C from here on, so that it always cleans up.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			var certs *devCerts
			if useTLS {
				if certs, err = makeDevCerts(filepath.Join(dataDir, "tls"), controllers, brokers); err != nil {
					return err
				}
			}
			// Each node's metrics server, bound before the node starts:
			// controllers first, then brokers.
			ms, err := startDevMetrics(metricsAddrs, usePprof, certs.nodes(controllers, brokers), log)
			if err != nil {
				return err
			}
			defer stopDevMetrics(ms)
			q, err := server.StartLocalQuorumAt(listen, dataDir, timing, buildVersion(), log, func(cfg *server.NodeConfig) {
				cfg.TLS = certs.controller(cfg.NodeID)
				cfg.Metrics = ms[cfg.NodeID-1].registerer()
				// As keel controller does by default.
				cfg.CrashGrace = controller.DefaultCrashGrace
			})
			if err != nil {
				if saved != nil {
					return fmt.Errorf("%w (the address saved in %s: stop what holds it, or give another --data-dir)", err, statePath)
				}
				return err
			}
			for i, n := range q.Nodes {
				ms[i].setReady(n.Ready)
				ms[i].attachConsole(n.LocalReads())
			}
			addrs := q.Addrs()
			nodes, err := startDevBrokers(brokers, addrs, plan.addrs, dataDir, log, certs, ms[controllers:])
			if err != nil {
				return errors.Join(err, q.Close())
			}
			// Every address as bound, saved before the banner gives it out;
			// what an earlier run saved for nodes not run now is kept.
			bound := saved.slots()
			for i, addr := range addrs {
				bound[devSlot{devController, int32(i + 1)}] = addr
			}
			for i, n := range nodes {
				id := int32(i + 1)
				bound[devSlot{devBroker, id}], bound[devSlot{devKafka, id}] = n.Addr(), n.KafkaAddr()
			}
			for i, m := range ms {
				if m.srv == nil {
					continue
				}
				if i < controllers {
					bound[devSlot{devControllerMetrics, int32(i + 1)}] = m.srv.Addr()
				} else {
					bound[devSlot{devBrokerMetrics, int32(i - controllers + 1)}] = m.srv.Addr()
				}
			}
			if err := saveDevState(dataDir, devStateOf(bound)); err != nil {
				stopDevBrokers(nodes, log)
				return errors.Join(err, q.Close())
			}
			// The banner says the cluster works: only once it does.
			if err := waitForCluster(q, nodes, devActiveTimeout, sigs); err != nil {
				stopDevBrokers(nodes, log)
				return errors.Join(err, q.Close())
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Keel dev cluster: %d controllers, %d brokers, data in %s\n", controllers, brokers, dataDir)
			for i, addr := range addrs {
				fmt.Fprintf(out, "  controller %d  %s%s\n", i+1, addr, ms[i].describe())
			}
			bootstrap := make([]string, len(nodes))
			for i, n := range nodes {
				bootstrap[i] = n.KafkaAddr()
				fmt.Fprintf(out, "  broker %d      %s  kafka %s%s\n", n.Agent().Status().BrokerID, n.Addr(), n.KafkaAddr(), ms[controllers+i].describe())
			}
			for _, note := range plan.movedNotes(slots, func(s devSlot) string { return bound[s] }) {
				fmt.Fprintf(out, "  (%s)\n", note)
			}
			// Commands that paste as they are into another shell: the
			// variables every admin command reads, then the commands.
			fmt.Fprintf(out, "\nIn another shell:\n  export KEEL_CONTROLLERS=%s\n", strings.Join(addrs, ","))
			if certs != nil {
				fmt.Fprintf(out, "  export KEEL_TLS_CA=%s KEEL_TLS_CERT=%s KEEL_TLS_KEY=%s   # mutual TLS: the admin certificate\n",
					certs.admin.CA, certs.admin.Cert, certs.admin.Key)
			}
			keel := devCommandName()
			fmt.Fprintf(out, "  %s quorum status\n", keel)
			if len(nodes) > 0 {
				fmt.Fprintf(out, "  %s broker list\n", keel)
				fmt.Fprintf(out, "  %s topic create orders --partitions 6 --replication-factor %d\n", keel, min(len(nodes), 3))
				fmt.Fprintf(out, "  %s topic describe orders\n", keel)
				fmt.Fprintf(out, "  %s broker inspect --address %s\n", keel, nodes[0].Addr())
				// The Kafka protocol, through every broker's Kafka listener.
				fmt.Fprintf(out, "  export KEEL_BOOTSTRAP=%s   # the brokers' Kafka listeners\n", strings.Join(bootstrap, ","))
				fmt.Fprintf(out, "  echo 'user-1:hello' | %s produce --topic orders --key-sep :\n", keel)
				fmt.Fprintf(out, "  %s consume --topic orders --from-beginning --max 1\n", keel)
			}
			fmt.Fprintf(out, "\nCtrl-C stops the cluster.\n")

			var fatal error
			done := make(chan struct{})
			select {
			case <-sigs:
			case fatal = <-firstFatal(nodes, done):
			}
			close(done)
			fmt.Fprintln(out, "stopping...")
			stopDevBrokers(nodes, log)
			return errors.Join(fatal, q.Close())
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "keep the cluster's data here instead of a temporary directory")
	f.IntVar(&controllers, "controllers-count", 3, "number of controllers: 1, 3 or 5")
	f.IntVar(&brokers, "brokers-count", 3, "number of brokers (ids 1 to N)")
	f.IntVar(&basePort, "base-port", devBasePort, "first port of the layout: brokers' Kafka listeners from it, controllers 100 above, brokers 200, metrics 300 and 400; a taken port moves to a free one; 0: free ports throughout")
	f.BoolVar(&useTLS, "tls", false, "run everything over mutual TLS, with a throwaway CA in DATA/tls")
	f.BoolVar(&useMetrics, "metrics", true, "serve each node's /metrics, /healthz and /readyz, and each controller's console, on a loopback port (printed at start)")
	f.BoolVar(&usePprof, "pprof", false, "with --metrics, also serve Go's profiler at /debug/pprof/")
	addRaftTimingFlags(f, &timing)
	return cmd
}

// devStateFile, in a dev cluster's data dir, holds what a second run needs.
const devStateFile = "dev.json"

// devActiveTimeout bounds the wait for an active controller and ready
// brokers before the banner: an election takes about a second; a quorum
// that cannot elect (its nodes unable to reach each other) never will.
const devActiveTimeout = 30 * time.Second

// devState is DATA/dev.json: every listener's address, so that a second
// run listens where the first did. Raft's configuration holds the
// controllers'; the user's shell (KEEL_BOOTSTRAP) and tools the others.
// Older files have the controllers only: the others are placed anew.
type devState struct {
	Controllers       []string         `json:"controllers"`
	ControllerMetrics []string         `json:"controller_metrics,omitempty"`
	Brokers           []devBrokerState `json:"brokers,omitempty"`
}

// devBrokerState is one broker's addresses in dev.json; "" is none saved.
type devBrokerState struct {
	Listen  string `json:"listen"`
	Kafka   string `json:"kafka"`
	Metrics string `json:"metrics,omitempty"`
}

// slots is st's addresses by slot; empty for a nil st.
func (st *devState) slots() map[devSlot]string {
	out := map[devSlot]string{}
	if st == nil {
		return out
	}
	put := func(role devRole, i int, addr string) {
		if addr != "" {
			out[devSlot{role, int32(i + 1)}] = addr
		}
	}
	for i, a := range st.Controllers {
		put(devController, i, a)
	}
	for i, a := range st.ControllerMetrics {
		put(devControllerMetrics, i, a)
	}
	for i, b := range st.Brokers {
		put(devBroker, i, b.Listen)
		put(devKafka, i, b.Kafka)
		put(devBrokerMetrics, i, b.Metrics)
	}
	return out
}

// devStateOf is the dev.json of addrs: nodes 1 to the highest id of each
// kind, "" for a slot without an address.
func devStateOf(addrs map[devSlot]string) devState {
	var st devState
	at := func(list []string, id int32, addr string) []string {
		for len(list) < int(id) {
			list = append(list, "")
		}
		list[id-1] = addr
		return list
	}
	for s, addr := range addrs {
		switch s.role {
		case devController:
			st.Controllers = at(st.Controllers, s.id, addr)
		case devControllerMetrics:
			st.ControllerMetrics = at(st.ControllerMetrics, s.id, addr)
		default:
			for len(st.Brokers) < int(s.id) {
				st.Brokers = append(st.Brokers, devBrokerState{})
			}
			b := &st.Brokers[s.id-1]
			switch s.role {
			case devBroker:
				b.Listen = addr
			case devKafka:
				b.Kafka = addr
			case devBrokerMetrics:
				b.Metrics = addr
			}
		}
	}
	return st
}

// loadDevState reads dataDir's dev.json: nil when dataDir holds no dev
// cluster yet. A dev cluster without the file (an older keel made it) is
// refused, as is a damaged file, in one line naming it.
func loadDevState(dataDir string) (*devState, error) {
	path := filepath.Join(dataDir, devStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dataDir, "controller-1")); serr == nil {
			return nil, fmt.Errorf("data dir %s holds a dev cluster but no %s with its controllers' addresses (an older keel made it): remove it, or give another --data-dir", dataDir, devStateFile)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, atomicfile.PathCause(err))
	}
	var st devState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s is damaged: %v", path, err)
	}
	if n := len(st.Controllers); n != 1 && n != 3 && n != 5 {
		return nil, fmt.Errorf("%s is damaged: %d controllers, want 1, 3 or 5", path, n)
	}
	// Every node's addresses but its metrics' must be there: a run saves
	// them all.
	check := func(s devSlot, addr string, optional bool) error {
		if addr == "" && optional {
			return nil
		}
		if err := hostport.Check(addr); err != nil {
			return fmt.Errorf("%s is damaged: %s: %v", path, s, err)
		}
		return nil
	}
	var errs []error
	for i, a := range st.Controllers {
		errs = append(errs, check(devSlot{devController, int32(i + 1)}, a, false))
	}
	for i, a := range st.ControllerMetrics {
		errs = append(errs, check(devSlot{devControllerMetrics, int32(i + 1)}, a, true))
	}
	for i, b := range st.Brokers {
		id := int32(i + 1)
		errs = append(errs, check(devSlot{devBroker, id}, b.Listen, false), check(devSlot{devKafka, id}, b.Kafka, false),
			check(devSlot{devBrokerMetrics, id}, b.Metrics, true))
	}
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: one line
		}
	}
	return &st, nil
}

func saveDevState(dataDir string, st devState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, devStateFile)
	if err := atomicfile.WriteMode(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %v", path, atomicfile.PathCause(err))
	}
	return nil
}

// waitForCluster waits until q has an active controller and every broker
// is ready (registered, active, caught up), at most timeout, or until a
// signal (Ctrl-C) arrives.
func waitForCluster(q *server.LocalQuorum, nodes []*node.Node, timeout time.Duration, sigs <-chan os.Signal) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		waiting := ""
		if q.Active() == nil {
			waiting = "no active controller: the controllers cannot elect one"
		} else {
			for _, n := range nodes {
				if err := n.Ready(); err != nil {
					waiting = fmt.Sprintf("broker %d is not ready: %v", n.Agent().BrokerID(), err)
					break
				}
			}
		}
		if waiting == "" {
			return nil
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("after %v, %s (see the log above)", timeout, waiting)
		case <-sigs:
			return errors.New("interrupted before the cluster was up")
		case <-tick.C:
		}
	}
}

// devCommandName is how the banner's commands call keel so that they paste
// as they are: "keel" when that is this binary on PATH, "go run ./cmd/keel"
// under go run, else the path this process was started by (./bin/keel
// from make run).
func devCommandName() string {
	self, err := os.Executable()
	if err != nil {
		return "keel"
	}
	if p, err := exec.LookPath("keel"); err == nil {
		if a, _ := filepath.EvalSymlinks(p); a != "" {
			if b, _ := filepath.EvalSymlinks(self); a == b {
				return "keel"
			}
		}
	}
	if strings.Contains(self, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/keel"
	}
	if strings.ContainsRune(os.Args[0], filepath.Separator) {
		return os.Args[0]
	}
	return self
}

// startDevBrokers starts brokers 1..n against the controllers at addrs, each
// on its address in listen with its data under dataDir, with a Kafka
// listener on another, and with its own certificate from certs (nil:
// plaintext).
func startDevBrokers(n int, addrs []string, listen map[devSlot]string, dataDir string, log *slog.Logger, certs *devCerts, ms []*metricsServer) (_ []*node.Node, err error) {
	var nodes []*node.Node
	defer func() {
		if err != nil {
			for _, bn := range nodes {
				bn.Close()
			}
		}
	}()
	// Consumer groups as Kafka's quickstart images serve them: no initial
	// rebalance delay, and __consumer_offsets replicated on as many
	// brokers as there are, up to Kafka's 3.
	groups := newGroupFlags()
	groups.initialRebalanceDelay = 0
	groups.replicationFactor = int16(min(n, kafka.DefaultOffsetsTopicReplicationFactor))
	for i := range n {
		id := int32(i + 1)
		kc := kafka.Config{SASL: defaultKafkaSASL}
		gc := groups.apply(&kc)
		// The reference data plane: a log per replica, followers fetching
		// from their leaders, so ISRs shrink and grow as brokers come and
		// go, as in a real cluster.
		bn, err := node.Start(node.Config{
			Agent: broker.Config{
				BrokerID:    id,
				Listen:      listen[devSlot{devBroker, id}],
				DataDir:     filepath.Join(dataDir, fmt.Sprintf("broker-%d", id)),
				Controllers: addrs,
				Logger:      log, // the agent adds broker_id
				TLS:         certs.broker(id),
				Metrics:     ms[i].registerer(),
			},
			KafkaListen: listen[devSlot{devKafka, id}],
			// SCRAM logins for Kafka clients that use them; anonymous
			// clients keep every right.
			Kafka:  kc,
			Groups: gc,
		})
		if err != nil {
			return nil, fmt.Errorf("broker %d: %w", id, err)
		}
		nodes = append(nodes, bn)
		ms[i].setReady(bn.Ready)
	}
	return nodes, nil
}

// startDevMetrics starts a metrics server per node on its address in
// addrs, HTTPS with its certificate in certs (nil: plain HTTP), or one that
// serves nothing where the address is "".
func startDevMetrics(addrs []string, pprof bool, certs []*tlsauth.Config, log *slog.Logger) ([]*metricsServer, error) {
	ms := make([]*metricsServer, 0, len(certs))
	for i, c := range certs {
		m, err := startMetrics(metricsOptions{addr: addrs[i], pprof: pprof, tls: c}, log)
		if err != nil {
			stopDevMetrics(ms)
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func stopDevMetrics(ms []*metricsServer) {
	for _, m := range ms {
		m.stop()
	}
}

// stopDevBrokers stops every broker at once with a controlled shutdown,
// while the controllers are still up to take it. A broker whose controlled
// shutdown does not complete is stopped all the same.
func stopDevBrokers(nodes []*node.Node, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), brokerShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Shutdown(ctx); err != nil {
				log.Warn("broker did not shut down cleanly", "broker", n.Agent().Status().BrokerID, "err", err)
			}
		}()
	}
	wg.Wait()
}

// firstFatal delivers the first broker's fatal error. Its goroutines end
// when their broker's does, or when done is closed.
func firstFatal(nodes []*node.Node, done <-chan struct{}) <-chan error {
	out := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			select {
			case err := <-n.Fatal():
				out <- err
			case <-done:
			}
		}()
	}
	return out
}

// devCerts are the certificates of `keel dev --tls`, from a throwaway CA:
// one per controller and broker, and the operator's admin certificate.
type devCerts struct {
	dir         string
	controllers map[int32]*tlsauth.Config
	brokers     map[int32]*tlsauth.Config
	admin       tlsauth.Files
}

// makeDevCerts writes a new CA's certificate and the certificates of
// controllers 1..nControllers, brokers 1..nBrokers and admin into dir, and
// loads each back as its process would from its flags.
func makeDevCerts(dir string, nControllers, nBrokers int) (*devCerts, error) {
	ca, err := tlsauth.NewCA("keel dev CA")
	if err != nil {
		return nil, err
	}
	d := &devCerts{dir: dir, controllers: map[int32]*tlsauth.Config{}, brokers: map[int32]*tlsauth.Config{}}
	load := func(cn string) (*tlsauth.Config, tlsauth.Files, error) {
		f, err := ca.WriteFiles(dir, cn)
		if err != nil {
			return nil, f, err
		}
		c, err := tlsauth.Load(f.Cert, f.Key, f.CA)
		return c, f, err
	}
	for i := 1; i <= nControllers; i++ {
		if d.controllers[int32(i)], _, err = load(fmt.Sprintf("controller-%d", i)); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= nBrokers; i++ {
		if d.brokers[int32(i)], _, err = load(fmt.Sprintf("broker-%d", i)); err != nil {
			return nil, err
		}
	}
	if _, d.admin, err = load("admin"); err != nil {
		return nil, err
	}
	return d, nil
}

// controller is node id's TLS; nil without --tls.
func (d *devCerts) controller(id int32) *tlsauth.Config {
	if d == nil {
		return nil
	}
	return d.controllers[id]
}

// nodes are the TLS of controllers 1..nControllers, then of brokers
// 1..nBrokers: nils without --tls.
func (d *devCerts) nodes(nControllers, nBrokers int) []*tlsauth.Config {
	out := make([]*tlsauth.Config, 0, nControllers+nBrokers)
	for i := 1; i <= nControllers; i++ {
		out = append(out, d.controller(int32(i)))
	}
	for i := 1; i <= nBrokers; i++ {
		out = append(out, d.broker(int32(i)))
	}
	return out
}

// broker is broker id's TLS; nil without --tls.
func (d *devCerts) broker(id int32) *tlsauth.Config {
	if d == nil {
		return nil
	}
	return d.brokers[id]
}
