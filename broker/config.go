package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// DefaultHeartbeatInterval is KRaft's broker heartbeat interval. With the
// controllers' default session timeout of 9s a broker may miss three
// heartbeats in a row before it is fenced.
const DefaultHeartbeatInterval = 2 * time.Second

// DefaultControlledShutdownTimeout bounds how long Shutdown waits for the
// controller to move this broker's leaderships away before it leaves
// without (Kafka retries its controlled shutdown for about as long).
const DefaultControlledShutdownTimeout = 30 * time.Second

// Config configures an Agent.
type Config struct {
	// BrokerID is this broker's id, unique in the cluster and tied to DataDir.
	BrokerID int32
	// Address is the host:port other nodes and admin tools use to reach this
	// broker's gRPC service; it is registered with the controllers. Empty
	// means the address the listener is bound to, which must then not be a
	// wildcard address.
	Address string
	// Listen is the address to bind the broker's gRPC service to. Empty
	// means Address.
	Listen string
	// KafkaAddress, when set, is the host:port Kafka clients reach this
	// broker's Kafka listener at (broker/kafka). It is registered with the
	// controllers, so that every broker's Metadata answer can name it.
	KafkaAddress string
	// Rack is registered with the controllers for rack-aware placement.
	Rack string
	// DataDir holds meta.json, which ties the directory to one broker id and,
	// once known, one cluster.
	DataDir string
	// Controllers are the controller addresses; any of them will do, the
	// agent finds the active controller.
	Controllers []string
	// HeartbeatInterval is how often the agent heartbeats; default 2s.
	HeartbeatInterval time.Duration
	// Handler is told of every metadata change; default NopHandler.
	Handler Handler
	// DataPlane, when set, holds the broker's replicas: it is told of every
	// metadata change before Handler, serves BrokerService.Fetch, and
	// reports the replicas `keel broker inspect` shows. Without one the
	// broker holds no data: Fetch is Unimplemented and inspect derives each
	// replica's role from the image. broker/replication's Manager is the
	// reference one.
	DataPlane DataPlane
	// ControlledShutdownTimeout bounds how long Shutdown waits for the
	// controller to release the broker; default
	// DefaultControlledShutdownTimeout.
	ControlledShutdownTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TLS, when set, is the broker's mutual TLS: it dials the controllers
	// with it and its own gRPC service requires it (authorizing each call
	// by the caller's certificate). The certificate must be
	// broker-<BrokerID> (or an admin's, as keel bench's brokers use), or the
	// controllers refuse the registration. Give the data plane the same
	// (replication.Config.TLS), to fetch from leaders with. Nil is
	// plaintext.
	TLS *tlsauth.Config
	// Conns bounds the connections the broker's gRPC port holds, counted
	// from accept (before TLS); the zero value bounds only those not yet
	// authenticated, to maxUnauthenticated.
	Conns connlimit.Limits
	// MaxStreamsPerConn bounds the gRPC calls in flight on one connection
	// to the broker's service; 0: rpc.DefaultBrokerStreams.
	MaxStreamsPerConn int
	// Metrics, when set, gets the agent's metrics (metrics.go) from Start
	// until Close; Start fails if they are registered there already. Nil
	// registers none.
	Metrics prometheus.Registerer
	// MaxMetadataVersion is the highest metadata.version the broker says
	// it supports when it registers; 0 is the binary's
	// (fsm.MaxMetadataVersion). Test wiring: a lower value pretends an
	// older binary, so that the controllers refuse to raise the level
	// past it.
	MaxMetadataVersion uint32
	// Dialer, when set, opens the agent's connections to the controllers
	// instead of a plain TCP dial. It is test wiring (keel broker's hidden
	// --test-dial-via): the data fault suite routes one broker's dials
	// through fault proxies, leader hints included.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
}

// check fills in defaults and rejects a config the agent cannot run with.
func (c *Config) check() error {
	switch {
	case c.BrokerID < 0:
		return fmt.Errorf("broker id %d is negative", c.BrokerID)
	case c.DataDir == "":
		return errors.New("a data dir is required")
	case len(c.Controllers) == 0:
		return errors.New("no controller address given")
	case c.Address == "" && c.Listen == "":
		return errors.New("an address to listen on or advertise is required")
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("heartbeat interval %v is negative", c.HeartbeatInterval)
	case c.ControlledShutdownTimeout < 0:
		return fmt.Errorf("controlled shutdown timeout %v is negative", c.ControlledShutdownTimeout)
	case c.MaxMetadataVersion != 0 && (c.MaxMetadataVersion < fsm.MinMetadataVersion || c.MaxMetadataVersion > fsm.MaxMetadataVersion):
		return fmt.Errorf("max metadata version %d is outside this binary's range %d-%d", c.MaxMetadataVersion, fsm.MinMetadataVersion, fsm.MaxMetadataVersion)
	}
	if c.MaxMetadataVersion == 0 {
		c.MaxMetadataVersion = fsm.MaxMetadataVersion
	}
	for _, addr := range append([]string{c.Address, c.Listen, c.KafkaAddress}, c.Controllers...) {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("address %q: %v", addr, err)
		}
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ControlledShutdownTimeout == 0 {
		c.ControlledShutdownTimeout = DefaultControlledShutdownTimeout
	}
	if c.Listen == "" {
		c.Listen = c.Address
	}
	if c.Handler == nil {
		c.Handler = NopHandler{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// advertised is the address to register: Address, or else the bound
// listener's, which is only reachable by others if it names a host.
func advertised(address string, bound net.Addr) (string, error) {
	if address != "" {
		return address, nil
	}
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return "", fmt.Errorf("listening on %s, a wildcard address: give an address to advertise", bound)
	}
	return bound.String(), nil
}

// brokerLimits are the broker's gRPC server's bounds on calls in flight.
func brokerLimits(cfg Config) rpc.ServerLimits {
	l := rpc.BrokerServerLimits
	if cfg.MaxStreamsPerConn > 0 {
		l.StreamsPerConn = cfg.MaxStreamsPerConn
	}
	return l
}
