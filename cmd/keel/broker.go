package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/broker/node"
	"github.com/keel-dev/keel/broker/replication"
	"github.com/keel-dev/keel/metrics"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// stopGrace is how long a stopping broker may take beyond its controlled
// shutdown: stopping its replicas, its data plane and its gRPC service.
const stopGrace = 10 * time.Second

// brokerShutdownTimeout bounds a broker's clean exit with the default
// controlled shutdown timeout: the controlled shutdown, then the stop.
const brokerShutdownTimeout = broker.DefaultControlledShutdownTimeout + stopGrace

// newBrokerCmd is `keel broker`: run without a subcommand it runs a broker;
// `keel broker list` and `keel broker inspect` are admin tools.
func newBrokerCmd(g *globalFlags) *cobra.Command {
	cfg := broker.Config{
		HeartbeatInterval:         broker.DefaultHeartbeatInterval,
		ControlledShutdownTimeout: broker.DefaultControlledShutdownTimeout,
	}
	replicas := replication.Config{
		FetchMaxWait:           replication.DefaultFetchMaxWait,
		ReplicaLagTimeMax:      replication.DefaultReplicaLagTimeMax,
		RetentionCheckInterval: replication.DefaultRetentionCheckInterval,
		CleanerBackoff:         replication.DefaultCleanerBackoff,
		ScrubBytesPerSecond:    replication.DefaultScrubBytesPerSecond,
	}
	var controllers, metricsAddr, testDialVia, kafkaListen, kafkaAdvertise string
	var insecure, pprof bool
	kafkaFetchMaxWait := kafka.DefaultFetchMaxWait
	var conns connFlags
	var kafkaLim kafkaLimits
	var kafkaSASLMode kafkaSASL
	var superUsers kafkaSuperUsers
	groups := newGroupFlags()
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker (the reference broker); list and inspect brokers",
		Long: `Run a broker: it registers with the active controller, heartbeats, and
replays the controllers' metadata stream into its own image. Its data dir ties
it to one broker id and, once it has joined, one cluster.

It runs the reference data plane (broker/replication): one log per replica
under DATA_DIR/logs, Kafka's replication protocol between them. A follower
fetches from its partition leader, waiting there up to
--replica-fetch-interval for new records; a leader adds a follower that has
caught up to the ISR, and drops one that has not for --replica-lag-time-max,
through the controllers. A broker stopped with SIGTERM records a clean
shutdown; one that was killed tells the controllers at its next start, and
leaves the eligible leader replicas (KIP-966).

SIGTERM or SIGINT makes a controlled shutdown: the controller moves this
broker's leaderships to other ISR members first (waiting at most
--controlled-shutdown-timeout, then leaving anyway), then fences the broker,
which stops. It stays registered, fenced, in its replica sets and in
placement, until it starts again (a rolling restart) or an operator removes
it for good with keel broker unregister.

A broker whose log fails to write (its disk is full or broken) makes a
controlled shutdown too, then exits with status 1: start it again once the
disk is fixed, and it recovers its logs.

With a subcommand, list the cluster's brokers, inspect one broker, or
unregister one that is gone for good.

With --tls-cert, --tls-key and --tls-ca (keel cert makes them) every
connection is mutual TLS. Without them the broker runs plaintext, and so
refuses to start unless every address it listens on, advertises and dials
(--listen, --advertise, --controllers, --metrics-addr, --kafka-listen,
--kafka-advertise) is loopback, or --insecure says plaintext is meant.

With --kafka-listen it serves the Kafka protocol too (docs/kafka.md):
Kafka clients produce and consume through it (keel produce, keel consume,
kcat, franz-go), learning every broker's --kafka-advertise address from its
metadata. With TLS the Kafka listener takes a client certificate from the
same CA; --kafka-sasl (default optional) also lets a client without one log
in by SASL/SCRAM (SASL_SSL) with a credential from keel user add.
`,
		Example: `  keel broker --broker-id 1 --listen 127.0.0.1:9292 --kafka-listen 127.0.0.1:9092 --data-dir /var/lib/keel/broker-1 \
    --controllers 127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194
  keel broker list
  keel broker inspect --address 127.0.0.1:9292`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.BrokerID < 0:
				return errors.New("--broker-id is required and must be a non-negative integer")
			case cfg.DataDir == "":
				return errors.New("--data-dir is required")
			case cfg.Listen == "" && cfg.Address == "":
				return errors.New("--listen is required")
			case cfg.HeartbeatInterval <= 0:
				return fmt.Errorf("--heartbeat-interval %v: want a positive duration", cfg.HeartbeatInterval)
			case cfg.ControlledShutdownTimeout <= 0:
				return fmt.Errorf("--controlled-shutdown-timeout %v: want a positive duration", cfg.ControlledShutdownTimeout)
			case replicas.FetchMaxWait <= 0:
				return fmt.Errorf("--replica-fetch-interval %v: want a positive duration", replicas.FetchMaxWait)
			case replicas.ReplicaLagTimeMax <= 0:
				return fmt.Errorf("--replica-lag-time-max %v: want a positive duration", replicas.ReplicaLagTimeMax)
			case replicas.FlushInterval < 0:
				return fmt.Errorf("--log-flush-interval %v: want a positive duration, or 0 to leave durability to replication", replicas.FlushInterval)
			case replicas.RetentionCheckInterval <= 0:
				return fmt.Errorf("--log-retention-check-interval %v: want a positive duration", replicas.RetentionCheckInterval)
			case replicas.CleanerBackoff <= 0:
				return fmt.Errorf("--log-cleaner-backoff %v: want a positive duration", replicas.CleanerBackoff)
			case kafkaFetchMaxWait <= 0:
				return fmt.Errorf("--kafka-fetch-max-wait %v: want a positive duration", kafkaFetchMaxWait)
			case replicas.ScrubBytesPerSecond < 0:
				return fmt.Errorf("--log-scrub-rate %d: want bytes per second, or 0 for no background scrub", replicas.ScrubBytesPerSecond)
			}
			if err := kafkaLim.check(); err != nil {
				return err
			}
			if err := kafkaSASLMode.check(); err != nil {
				return err
			}
			if err := groups.check(); err != nil {
				return err
			}
			if err := superUsers.check(); err != nil {
				return err
			}
			if cfg.MaxStreamsPerConn <= 0 {
				return fmt.Errorf("--max-concurrent-streams %d: want a positive number of calls", cfg.MaxStreamsPerConn)
			}
			if cfg.Controllers = splitAddrs(controllers); len(cfg.Controllers) == 0 {
				return errors.New("--controllers: no controller address given")
			}
			addrs := append(brokerAddrs(cfg.Listen, cfg.Address, cfg.Controllers, metricsAddr),
				flagAddr{flag: "--kafka-listen", addr: kafkaListen}, flagAddr{flag: "--kafka-advertise", addr: kafkaAdvertise})
			exposed, err := checkPlaintext(tlsGiven(cmd), insecure, addrs)
			if err != nil {
				return err
			}
			if cfg.TLS, err = tlsFlags(cmd); err != nil {
				return err
			}
			if cfg.Dialer, err = dialVia(testDialVia); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			plan, err := conns.plan(weightBrokerPort, metricsAddr != "", kafkaListen != "")
			if err != nil {
				return err
			}
			cfg.Conns = plan.port
			cfg.Logger = log
			cfg.Handler = broker.LoggingHandler{Logger: log.With("component", "broker", "broker_id", cfg.BrokerID)}
			metricsSrv, err := startMetrics(metricsOptions{addr: metricsAddr, pprof: pprof, tls: cfg.TLS, conns: plan.metrics}, log)
			if err != nil {
				return err
			}
			defer metricsSrv.stop() // after the broker has stopped
			cfg.Metrics = metricsSrv.registerer()
			kc := kafka.Config{FetchMaxWait: kafkaFetchMaxWait, Conns: plan.kafka}
			kafkaLim.apply(&kc)
			kafkaSASLMode.apply(&kc)
			superUsers.apply(&kc)
			gc := groups.apply(&kc)
			// Catch signals before starting, as the controller does, so a
			// stop during the start ends cleanly instead of killing the
			// process mid-start.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			n, err := node.Start(node.Config{Agent: cfg, Replication: replicas, KafkaListen: kafkaListen, KafkaAdvertise: kafkaAdvertise, Kafka: kc, Groups: gc})
			if err != nil {
				return err
			}
			if cfg.TLS == nil {
				// Said once started, so that a refused start stays one line.
				logPlaintext(log, insecure, exposed)
			}
			metricsSrv.setReady(n.Ready)
			select {
			case sig := <-sigs:
				log.Info("stopping", "signal", sig.String())
				ctx, cancel := context.WithTimeout(context.Background(), cfg.ControlledShutdownTimeout+stopGrace)
				defer cancel()
				// A broker whose controlled shutdown times out still
				// stops: the controllers fence it when its session
				// expires, and move its leaderships then.
				if err := n.Shutdown(ctx); err != nil {
					log.Warn("broker did not shut down cleanly", "err", err)
				}
				return nil
			case err := <-n.Fatal():
				n.Close()
				return err
			case err := <-n.LogFailed():
				log.Error("a log failed to write (disk full or broken): stopping; start the broker again once the disk is fixed", "err", err)
				ctx, cancel := context.WithTimeout(context.Background(), cfg.ControlledShutdownTimeout+stopGrace)
				defer cancel()
				if serr := n.Shutdown(ctx); serr != nil {
					log.Warn("broker did not shut down cleanly", "err", serr)
				}
				return fmt.Errorf("a log failed to write: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.Int32Var(&cfg.BrokerID, "broker-id", -1, "this broker's id, unique in the cluster (required)")
	hidePlaceholder(f, "broker-id")
	f.StringVar(&cfg.Listen, "listen", "", "address to listen on for the broker's gRPC service (required)")
	f.StringVar(&cfg.Address, "advertise", "", "address the controllers and tools reach this broker at (default: --listen)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the broker's metadata and its replicas' logs (required)")
	f.StringVar(&controllers, "controllers", defaultControllers, "controller addresses, host:port,... (any one will do)")
	f.StringVar(&cfg.Rack, "rack", "", "the broker's rack, for rack-aware placement")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "how often to heartbeat to the active controller")
	f.DurationVar(&cfg.ControlledShutdownTimeout, "controlled-shutdown-timeout", cfg.ControlledShutdownTimeout,
		"on SIGTERM, how long to wait for this broker's leaderships to move away before leaving anyway")
	f.DurationVar(&replicas.FetchMaxWait, "replica-fetch-interval", replicas.FetchMaxWait,
		"how long a follower's fetch waits on its leader for new records (Kafka's replica.fetch.wait.max.ms)")
	f.IntVar(&replicas.FetchResponseMaxBytes, "replica-fetch-response-max-bytes", replication.DefaultFetchResponseMaxBytes,
		"the most bytes of records one answer of a follower's fetch session carries, at least one batch (Kafka's replica.fetch.response.max.bytes)")
	f.DurationVar(&replicas.ReplicaLagTimeMax, "replica-lag-time-max", replicas.ReplicaLagTimeMax,
		"how long a follower may lag before the leader drops it from the ISR (Kafka's replica.lag.time.max.ms)")
	f.DurationVar(&replicas.FlushInterval, "log-flush-interval", replicas.FlushInterval,
		"fsync each log at least this often while it takes writes (Kafka's flush.ms); 0: only at roll and stop")
	f.DurationVar(&replicas.RetentionCheckInterval, "log-retention-check-interval", replicas.RetentionCheckInterval,
		"how often each log applies retention.ms and retention.bytes (Kafka's log.retention.check.interval.ms)")
	f.DurationVar(&replicas.CleanerBackoff, "log-cleaner-backoff", replicas.CleanerBackoff,
		"how long the log cleaner rests when no compacted log is dirty enough to clean (Kafka's log.cleaner.backoff.ms)")
	f.Int64Var(&replicas.ScrubBytesPerSecond, "log-scrub-rate", replicas.ScrubBytesPerSecond,
		"bytes per second a background scrub verifies sealed segments at; 0: none")
	addTestMaxMetadataVersionFlag(f, &cfg.MaxMetadataVersion)
	f.StringVar(&testDialVia, "test-dial-via", "", "for Keel's own tests: ADDR=VIA,... dial VIA whenever the broker dials ADDR (a controller or a leader)")
	_ = f.MarkHidden("test-dial-via")
	f.StringVar(&kafkaListen, "kafka-listen", "", "address to serve the Kafka protocol on; empty: none")
	f.StringVar(&kafkaAdvertise, "kafka-advertise", "", "address Kafka clients reach this broker's Kafka listener at (default: --kafka-listen)")
	f.DurationVar(&kafkaFetchMaxWait, "kafka-fetch-max-wait", kafkaFetchMaxWait,
		"the longest a Kafka fetch waits for records, whatever it asks")
	kafkaLim.addFlags(f)
	kafkaSASLMode.addFlags(f)
	superUsers.addFlags(f)
	groups.addFlags(f)
	f.IntVar(&cfg.MaxStreamsPerConn, "max-concurrent-streams", rpc.DefaultBrokerStreams,
		"the gRPC calls in flight on one connection (each partition a follower fetches is one)")
	addMetricsFlags(cmd, &metricsAddr, &pprof)
	addInsecureFlag(cmd, &insecure)
	conns.add(cmd, true)
	cmd.AddCommand(newBrokerListCmd(), newBrokerInspectCmd(), newBrokerUnregisterCmd(), newBrokerDrainCmd(), newBrokerScrubCmd())
	return cmd
}

// brokerAddrs are the addresses a broker listens on, advertises and dials,
// as its flags give them: --listen, --advertise, every --controllers
// address, --metrics-addr.
func brokerAddrs(listen, advertise string, controllers []string, metricsAddr string) []flagAddr {
	addrs := []flagAddr{{flag: "--listen", addr: listen}, {flag: "--advertise", addr: advertise}}
	for _, c := range controllers {
		addrs = append(addrs, flagAddr{flag: "--controllers", addr: c})
	}
	return append(addrs, flagAddr{flag: "--metrics-addr", addr: metrics.ListenAddr(metricsAddr)})
}

// dialVia parses --test-dial-via, ADDR=VIA,...: test wiring, with which
// the data fault suite routes one broker's dials to the controllers (leader
// hints included) through fault proxies of its own. Empty: nil, plain
// dials.
func dialVia(list string) (func(context.Context, string) (net.Conn, error), error) {
	via := map[string]string{}
	for _, item := range splitAddrs(list) {
		from, to, ok := strings.Cut(item, "=")
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("--test-dial-via %q: want ADDR=VIA pairs, comma-separated", item)
		}
		via[from] = to
	}
	if len(via) == 0 {
		return nil, nil
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if to, ok := via[addr]; ok {
			addr = to
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, nil
}

// splitAddrs splits a comma-separated address list, dropping empty items.
func splitAddrs(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// brokerRow is the JSON contract of `keel broker list` (DESIGN.md).
type brokerRow struct {
	ID      int32  `json:"id"`
	Epoch   int64  `json:"epoch"`
	Address string `json:"address"`
	// KafkaAddress is the broker's advertised Kafka listener, "" without one.
	KafkaAddress string `json:"kafka_address"`
	Rack         string `json:"rack"`
	State        string `json:"state"`
}

func newBrokerListCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the registered brokers and their states (active, fenced, shutting_down)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]brokerRow, *keelpb.ReadSource, error) {
				resp, err := c.ListBrokers(ctx, opts...)
				if err != nil {
					return nil, nil, err
				}
				rows := make([]brokerRow, 0, len(resp.GetBrokers()))
				for _, b := range resp.GetBrokers() {
					rows = append(rows, brokerRow{ID: b.GetId(), Epoch: b.GetEpoch(), Address: b.GetAddress(), KafkaAddress: b.GetKafkaAddress(), Rack: b.GetRack(), State: b.GetState()})
				}
				sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
				return rows, resp.GetSource(), nil
			}, tableOf([]string{"ID", "EPOCH", "ADDRESS", "KAFKA ADDRESS", "RACK", "STATE"}, "", func(r brokerRow) []string {
				return []string{fmt.Sprint(r.ID), fmt.Sprint(r.Epoch), r.Address, orDash(r.KafkaAddress), orDash(r.Rack), r.State}
			}))
		},
	}
	a.add(cmd)
	r.add(cmd)
	return cmd
}

// unregisteredBroker is the JSON contract of `keel broker unregister`.
type unregisteredBroker struct {
	BrokerID    int32 `json:"broker_id"`
	BrokerEpoch int64 `json:"broker_epoch"`
}

func newBrokerUnregisterCmd() *cobra.Command {
	a := &adminFlags{}
	var id int32
	var epoch int64
	cmd := &cobra.Command{
		Use:   "unregister",
		Short: "Remove a stopped (fenced) broker from the cluster for good",
		Long: `Remove a broker that is gone for good: it leaves keel broker list, placement
and the replication-factor counts, and the ISRs it is still in. A broker
stopped with SIGTERM (or killed, once its session has expired) stays
registered, fenced, so that a restart finds its place kept; unregistering is
the operator's decision that it will not come back.

Refused while the broker is active or shutting down (not fenced): stop it
first. A broker that starts again after being unregistered simply registers
anew. --broker-epoch, when given, removes only that incarnation.`,
		Example: `  keel broker unregister --broker-id 4`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case id < 0:
				return errors.New("--broker-id is required and must be a non-negative integer")
			case epoch < 0:
				return fmt.Errorf("--broker-epoch %d: want a positive epoch, or 0 for whichever is registered", epoch)
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (unregisteredBroker, error) {
				resp, err := c.UnregisterBroker(ctx, &keelpb.UnregisterBrokerRequest{BrokerId: id, BrokerEpoch: epoch})
				if err != nil {
					return unregisteredBroker{}, err
				}
				return unregisteredBroker{BrokerID: id, BrokerEpoch: resp.GetBrokerEpoch()}, nil
			}, func(w io.Writer, u unregisteredBroker) error {
				fmt.Fprintf(w, "unregistered broker %d (epoch %d)\n", u.BrokerID, u.BrokerEpoch)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&id, "broker-id", -1, "the broker to remove (required)")
	hidePlaceholder(f, "broker-id")
	f.Int64Var(&epoch, "broker-epoch", 0, "remove only this incarnation (default: whichever is registered)")
	a.add(cmd)
	return cmd
}

// brokerInspect is the JSON contract of `keel broker inspect` (DESIGN.md).
type brokerInspect struct {
	BrokerID        int32        `json:"broker_id"`
	BrokerEpoch     int64        `json:"broker_epoch"`
	ControllerID    int32        `json:"controller_id"`
	ControllerEpoch int64        `json:"controller_epoch"`
	MetadataOffset  uint64       `json:"metadata_offset"`
	ClusterID       string       `json:"cluster_id"`
	State           string       `json:"state"`
	Partitions      []replicaRow `json:"partitions"`
}

type replicaRow struct {
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Role        string  `json:"role"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	ISR         []int32 `json:"isr"`
}

func inspectView(resp *keelpb.InspectResponse) brokerInspect {
	v := brokerInspect{
		BrokerID:        resp.GetBrokerId(),
		BrokerEpoch:     resp.GetBrokerEpoch(),
		ControllerID:    resp.GetControllerId(),
		ControllerEpoch: resp.GetControllerEpoch(),
		MetadataOffset:  resp.GetMetadataOffset(),
		ClusterID:       resp.GetClusterId(),
		State:           resp.GetState(),
		Partitions:      make([]replicaRow, 0, len(resp.GetPartitions())),
	}
	for _, p := range resp.GetPartitions() {
		v.Partitions = append(v.Partitions, replicaRow{Topic: p.GetTopic(), Partition: p.GetPartition(), Role: p.GetRole(),
			Leader: p.GetLeader(), LeaderEpoch: p.GetLeaderEpoch(), ISR: append([]int32{}, p.GetIsr()...)})
	}
	return v
}

func newBrokerInspectCmd() *cobra.Command {
	f := &brokerCallFlags{}
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show one broker's own view: epoch, controller, metadata offset, replicas",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return brokerCall(cmd, f, func(ctx context.Context, bc *rpc.BrokerClient) (brokerInspect, error) {
				resp, err := bc.Inspect(ctx)
				if err != nil {
					return brokerInspect{}, err
				}
				return inspectView(resp), nil
			}, inspectTable)
		},
	}
	f.add(cmd, 10*time.Second)
	return cmd
}

func inspectTable(w io.Writer, v brokerInspect) error {
	fmt.Fprintf(w, "Broker ID:        %d\nBroker epoch:     %d\nState:            %s\nCluster ID:       %s\nController:       %s\nController epoch: %d\nMetadata offset:  %d\n\n",
		v.BrokerID, v.BrokerEpoch, v.State, orDash(v.ClusterID), leaderCell(v.ControllerID), v.ControllerEpoch, v.MetadataOffset)
	return tableOf([]string{"TOPIC", "PARTITION", "ROLE", "LEADER", "LEADER EPOCH", "ISR"}, "No replicas.", func(p replicaRow) []string {
		isr := make([]string, len(p.ISR))
		for i, id := range p.ISR {
			isr[i] = fmt.Sprint(id)
		}
		return []string{p.Topic, fmt.Sprint(p.Partition), p.Role, fmt.Sprint(p.Leader), fmt.Sprint(p.LeaderEpoch), strings.Join(isr, ",")}
	})(w, v.Partitions)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
