package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/rpc"
)

// addControllerCallLimitFlags adds a controller's bounds on the gRPC calls
// in flight (rpc.ServerLimits).
func addControllerCallLimitFlags(f *pflag.FlagSet, l *rpc.ServerLimits) {
	f.IntVar(&l.StreamsPerConn, "max-concurrent-streams", rpc.DefaultControllerStreams,
		"the gRPC calls in flight on one connection; more wait")
	f.IntVar(&l.CallsPerIdentity, "max-calls-per-identity", rpc.DefaultCallsPerIdentity,
		"with TLS, the gRPC calls in flight of one certificate over all its connections; more are refused")
}

// checkCallLimits refuses a bound that is not positive, naming its flag.
func checkCallLimits(l rpc.ServerLimits) error {
	switch {
	case l.StreamsPerConn <= 0:
		return fmt.Errorf("--max-concurrent-streams %d: want a positive number of calls", l.StreamsPerConn)
	case l.CallsPerIdentity <= 0:
		return fmt.Errorf("--max-calls-per-identity %d: want a positive number of calls", l.CallsPerIdentity)
	}
	return nil
}
