package main

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/tlsauth"
	"github.com/prometheus/client_golang/prometheus"
)

// kafkaListener is a broker's Kafka listener: bound before the agent starts
// (so that the address it registers is the real one, port 0 included),
// served once the agent is there.
type kafkaListener struct {
	lis       net.Listener
	advertise string
	srv       *kafka.Server
	// fetchMaxWait: kafka.Config.FetchMaxWait (0: its default).
	fetchMaxWait time.Duration
}

// bindKafka binds --kafka-listen and works out the address to register:
// --kafka-advertise, or the bound address, which must then name a host.
// An empty listen address means no Kafka listener (nil).
func bindKafka(listen, advertise string) (*kafkaListener, error) {
	if listen == "" {
		if advertise != "" {
			return nil, fmt.Errorf("--kafka-advertise %s without --kafka-listen", advertise)
		}
		return nil, nil
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--kafka-listen %s: %v", listen, err)
	}
	if advertise == "" {
		tcp, ok := lis.Addr().(*net.TCPAddr)
		if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
			lis.Close()
			return nil, fmt.Errorf("--kafka-listen %s is a wildcard address: give --kafka-advertise, the address clients reach", listen)
		}
		advertise = lis.Addr().String()
	}
	return &kafkaListener{lis: lis, advertise: advertise}, nil
}

// serve starts the Kafka protocol on the bound listener over agent's image
// and controller link and the data plane backend, with the broker's TLS
// (nil: plaintext), its bounds on connections and request bytes, its
// request metrics in reg (nil: none).
func (k *kafkaListener) serve(agent *broker.Agent, backend broker.Backend, brokerID int32, tlsCfg *tlsauth.Config, conns connlimit.Limits, limits kafkaLimits, reg prometheus.Registerer, log *slog.Logger) error {
	cfg := kafka.Config{
		BrokerID:     brokerID,
		Image:        agent,
		Ready:        agent.CaughtUp(),
		Backend:      backend,
		Controller:   agent,
		TLS:          tlsCfg,
		Logger:       log,
		Metrics:      reg,
		FetchMaxWait: k.fetchMaxWait,
		Conns:        conns,
	}
	limits.apply(&cfg)
	srv, err := kafka.Serve(k.lis, cfg)
	if err != nil {
		k.lis.Close()
		return err
	}
	k.srv = srv
	return nil
}

// close stops the listener (nil-safe); a bound listener never served is
// closed too.
func (k *kafkaListener) close() {
	switch {
	case k == nil:
	case k.srv != nil:
		k.srv.Close()
	default:
		k.lis.Close()
	}
}
