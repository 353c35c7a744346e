package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/internal/connlimit"
)

// connFlags are a process's bounds on the connections its listeners hold
// (docs/operations.md: Connection limits): --max-connections and
// --max-connections-per-ip for its port (--listen), the same with kafka-
// for a broker's Kafka listener, and --reserved-files, the descriptors
// kept for everything else. A bound left at 0 is derived from the
// open-files limit (connlimit.Plan).
type connFlags struct {
	reserved             int
	maxConns, maxPerIP   int
	kafkaConns, kafkaPer int
}

// Weights of the derived bounds: what the reserve leaves goes mostly to
// the listener that takes clients (a broker's Kafka listener, a
// controller's port), and an eighth to the metrics listener.
const (
	weightKafka      = 6
	weightBrokerPort = 1
	weightCtrlPort   = 7
	weightMetrics    = 1
)

func (c *connFlags) add(cmd *cobra.Command, kafka bool) {
	f := cmd.Flags()
	f.IntVar(&c.reserved, "reserved-files", 0,
		"file descriptors no listener may take; 0: half the open-files limit, at least 256")
	f.IntVar(&c.maxConns, "max-connections", 0,
		"the most connections --listen holds (Kafka's max.connections); 0: from the open-files limit")
	f.IntVar(&c.maxPerIP, "max-connections-per-ip", 0,
		"the most connections --listen holds from one IP address; 0: a quarter of --max-connections")
	if kafka {
		f.IntVar(&c.kafkaConns, "kafka-max-connections", 0,
			"the most connections the Kafka listener holds (Kafka's max.connections); 0: from the open-files limit")
		f.IntVar(&c.kafkaPer, "kafka-max-connections-per-ip", 0,
			"the Kafka listener's connections from one IP address; 0: a quarter of --kafka-max-connections")
	}
}

// connPlan is the bounds of each of a process's listeners.
type connPlan struct {
	port, metrics, kafka connlimit.Limits
}

// plan derives the bounds of the port (weighted portWeight), the metrics
// listener if withMetrics, and the Kafka listener if withKafka, from the
// open-files limit. It fails in one line if the bounds given cannot fit.
func (c *connFlags) plan(portWeight int, withMetrics, withKafka bool) (connPlan, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"--reserved-files", c.reserved}, {"--max-connections", c.maxConns}, {"--max-connections-per-ip", c.maxPerIP},
		{"--kafka-max-connections", c.kafkaConns}, {"--kafka-max-connections-per-ip", c.kafkaPer}} {
		if f.v < 0 {
			return connPlan{}, fmt.Errorf("%s %d: want a positive number, or 0 to derive it", f.name, f.v)
		}
	}
	files, err := connlimit.OpenFilesLimit()
	if err != nil {
		return connPlan{}, fmt.Errorf("read the open-files limit: %v", err)
	}
	shares := []connlimit.Share{{Flag: "--max-connections", Weight: portWeight, MaxConns: c.maxConns, MaxPerSource: c.maxPerIP}}
	if withMetrics {
		shares = append(shares, connlimit.Share{Flag: "the metrics listener", Weight: weightMetrics})
	}
	if withKafka {
		shares = append(shares, connlimit.Share{Flag: "--kafka-max-connections", Weight: weightKafka, MaxConns: c.kafkaConns, MaxPerSource: c.kafkaPer})
	}
	lims, err := connlimit.Plan(files, c.reserved, shares)
	if err != nil {
		return connPlan{}, err
	}
	p := connPlan{port: lims[0]}
	lims = lims[1:]
	if withMetrics {
		p.metrics, lims = lims[0], lims[1:]
	}
	if withKafka {
		p.kafka = lims[0]
	}
	return p, nil
}
