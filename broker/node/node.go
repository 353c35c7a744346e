// Package node assembles one broker process (a Node): the agent (package
// broker), the reference data plane (broker/replication) and, when asked,
// the Kafka listener (broker/kafka), with their metrics on one registerer.
// It is to a broker what server.Node is to a controller: `keel broker` and
// `keel dev` start brokers through it, so that both are wired alike, and the
// order things start and stop in lives here once.
//
// Like the rest of the broker library it links no controller, no raft and
// no server (broker's TestLibrary_LinksNoControllerOrRaft). Flags, the metrics HTTP
// server and signals stay with the commands.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/broker/replication"
)

// Config configures a Node. The agent's config holds what the three parts
// share; Start copies it into the others.
type Config struct {
	// Agent configures the broker agent. Start sets its DataPlane (the
	// replication Manager) and, with a Kafka listener, its KafkaAddress.
	Agent broker.Config
	// Replication configures the data plane: its timings and rates. Start
	// sets its DataDir, TLS, Dialer and Metrics to the agent's, and its
	// Logger to the agent's with the broker's id.
	Replication replication.Config
	// KafkaListen is the address to serve the Kafka protocol on (keel
	// broker's --kafka-listen); empty: no Kafka listener.
	KafkaListen string
	// KafkaAdvertise is the address Kafka clients reach the listener at,
	// registered with the controllers (--kafka-advertise); empty: the bound
	// address, which must then name a host.
	KafkaAdvertise string
	// Kafka configures the Kafka listener: its bounds and waits. Start sets
	// its BrokerID, Image, Ready, Backend, Controller, TLS, Logger and
	// Metrics from the agent and the data plane.
	Kafka kafka.Config
	// Groups, when set with a Kafka listener, serves consumer groups: a
	// group coordinator (broker/group) for the __consumer_offsets
	// partitions this broker leads, elected as the agent applies their
	// leaderships. Start sets its Log, Logger and Metrics.
	Groups *group.Config
}

// The listener's coordinator is broker/group's.
var _ kafka.Groups = (*group.Coordinator)(nil)

// Node is one running broker: the agent, its data plane and its Kafka
// listener.
type Node struct {
	agent *broker.Agent
	dp    *replication.Manager
	// kafka is nil without a Kafka listener.
	kafka          *kafka.Server
	kafkaAdvertise string
	// groups is nil without Config.Groups.
	groups *group.Coordinator
}

// Start starts a broker: the data plane, then the Kafka listener's port
// (bound first so that the address the agent registers is the real one,
// port 0 included), then the agent, which registers in the background, and
// last the Kafka listener's service over the agent's image and controller
// link. Every error names what is wrong in one line and leaves nothing
// running.
func Start(cfg Config) (_ *Node, err error) {
	if cfg.Agent.Logger == nil {
		cfg.Agent.Logger = slog.Default()
	}
	log := cfg.Agent.Logger
	rc := cfg.Replication
	rc.DataDir, rc.TLS, rc.Dialer, rc.Metrics = cfg.Agent.DataDir, cfg.Agent.TLS, cfg.Agent.Dialer, cfg.Agent.Metrics
	if rc.MaxBatchBytes == 0 && cfg.Kafka.MaxRequestSize > 0 {
		// No produced batch is larger than the listener's frame.
		rc.MaxBatchBytes = int64(cfg.Kafka.MaxRequestSize)
	}
	rc.Logger = log.With("broker_id", cfg.Agent.BrokerID)
	dp, err := replication.New(rc)
	if err != nil {
		return nil, err
	}
	lis, advertise, err := bindKafka(cfg.KafkaListen, cfg.KafkaAdvertise)
	if err != nil {
		return nil, errors.Join(err, dp.Close())
	}
	ac := cfg.Agent
	ac.DataPlane = dp
	kc := cfg.Kafka
	var groups *group.Coordinator
	if lis != nil {
		ac.KafkaAddress = advertise
		if cfg.Groups != nil {
			gc := *cfg.Groups
			gc.Log, gc.Logger, gc.Metrics = kafka.NewGroupLog(dp), log.With("component", "group", "broker_id", ac.BrokerID), ac.Metrics
			if groups, err = group.New(gc); err != nil {
				lis.Close()
				return nil, errors.Join(fmt.Errorf("group coordinator: %w", err), dp.Close())
			}
			// The coordinator learns its partitions from the agent, after
			// the data plane has acted on each leadership.
			kc.GroupElections = kafka.NewGroupElections(ac.Handler)
			ac.Handler = kc.GroupElections
			kc.Groups = func(group.Log) kafka.Groups { return groups }
		}
	}
	agent, err := broker.Start(ac)
	if err != nil {
		if lis != nil {
			lis.Close()
		}
		if groups != nil {
			groups.Close()
		}
		return nil, errors.Join(err, dp.Close())
	}
	n := &Node{agent: agent, dp: dp, kafkaAdvertise: advertise, groups: groups}
	if lis == nil {
		return n, nil
	}
	kc.BrokerID, kc.Image, kc.Ready, kc.Backend, kc.Controller = ac.BrokerID, agent, agent.CaughtUp(), dp, agent
	kc.TLS, kc.Logger, kc.Metrics = ac.TLS, log, ac.Metrics
	if n.kafka, err = kafka.Serve(lis, kc); err != nil {
		lis.Close()
		agent.Close() // closes the data plane too
		if groups != nil {
			groups.Close()
		}
		return nil, err
	}
	return n, nil
}

// bindKafka binds listen and works out the address to register: advertise,
// or the bound address, which must then name a host. An empty listen
// address means no Kafka listener (nil).
func bindKafka(listen, advertise string) (net.Listener, string, error) {
	if listen == "" {
		if advertise != "" {
			return nil, "", fmt.Errorf("--kafka-advertise %s without --kafka-listen", advertise)
		}
		return nil, "", nil
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("--kafka-listen %s: %v", listen, err)
	}
	if advertise == "" {
		tcp, ok := lis.Addr().(*net.TCPAddr)
		if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
			lis.Close()
			return nil, "", fmt.Errorf("--kafka-listen %s is a wildcard address: give --kafka-advertise, the address clients reach", listen)
		}
		advertise = lis.Addr().String()
	}
	return lis, advertise, nil
}

// Agent is the broker's agent: its image, state and controller link.
func (n *Node) Agent() *broker.Agent { return n.agent }

// Addr is the address the broker's gRPC service listens on.
func (n *Node) Addr() string { return n.agent.Addr() }

// KafkaAddr is the address Kafka clients reach the broker's Kafka listener
// at, as registered; "" without one.
func (n *Node) KafkaAddr() string { return n.kafkaAdvertise }

// Ready says whether the broker serves: registered, active and caught up
// (broker.Agent.Ready).
func (n *Node) Ready() error { return n.agent.Ready() }

// Fatal delivers an error that means the broker must stop at once, with
// Close (its data dir belongs to another cluster, say).
func (n *Node) Fatal() <-chan error { return n.agent.Fatal() }

// LogFailed delivers the first failed write of a log (a full or broken
// disk). Kafka halts a broker whose every log dir has failed; the broker
// should stop with Shutdown, whose controlled shutdown moves its
// leaderships away at once. The failed log is not flushed, so no clean
// shutdown is recorded, and the next start recovers every log.
func (n *Node) LogFailed() <-chan error { return n.dp.Failed() }

// Shutdown stops the broker with a controlled shutdown (broker.Agent.
// Shutdown), then closes the Kafka listener. The listener closes last so
// that its clients, answered NOT_LEADER while the controller moves this
// broker's leaderships away, follow them to the new leaders rather than
// losing their connection first. A shutdown that did not complete is
// returned; the broker is stopped either way.
func (n *Node) Shutdown(ctx context.Context) error {
	err := n.agent.Shutdown(ctx)
	n.closeKafka()
	return err
}

// Close stops the broker without a controlled shutdown, as a crash would
// look to the controllers (broker.Agent.Close), then closes the Kafka
// listener.
func (n *Node) Close() error {
	err := n.agent.Close()
	n.closeKafka()
	return err
}

func (n *Node) closeKafka() {
	if n.kafka != nil {
		n.kafka.Close()
	}
	if n.groups != nil {
		n.groups.Close()
	}
}
