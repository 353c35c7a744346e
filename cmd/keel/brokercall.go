package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// brokerCallFlags are the flags of a command that asks one broker's own
// service (keel broker inspect, keel broker scrub).
type brokerCallFlags struct {
	address, output string
	timeout         time.Duration
}

// add adds --address, -o and --timeout (default timeout).
func (f *brokerCallFlags) add(cmd *cobra.Command, timeout time.Duration) {
	fs := cmd.Flags()
	fs.StringVar(&f.address, "address", "", "the broker's address, host:port (required)")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&f.timeout, "timeout", timeout, "how long to wait for the broker's answer")
}

// brokerCall is call on the broker at --address, dialled with the TLS
// flags.
func brokerCall[V any](cmd *cobra.Command, f *brokerCallFlags, ask func(context.Context, *rpc.BrokerClient) (V, error), table func(io.Writer, V) error) error {
	if f.address == "" {
		return errors.New("--address is required")
	}
	dial := func(tlsCfg *tlsauth.Config) (*rpc.BrokerClient, error) {
		return rpc.DialBroker(f.address, rpc.WithTLS(tlsCfg))
	}
	return call(cmd, f.output, f.timeout, dial, ask, table)
}
