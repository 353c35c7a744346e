package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

const (
	defaultControllers  = "127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194" // keel dev's, and the README's
	defaultAdminTimeout = 10 * time.Second
)

// adminFlags are the flags every admin command that talks to the
// controllers takes.
type adminFlags struct {
	controllers string
	output      string
	// timeout, when set before add, is --timeout's default in place of
	// defaultAdminTimeout: a snapshot transfer needs longer.
	timeout time.Duration
}

func (a *adminFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.controllers, "controllers", defaultControllers, "controller addresses, host:port,... (any one will do)")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&a.timeout, "timeout", cmp.Or(a.timeout, defaultAdminTimeout), "how long to keep trying before giving up")
}

// adminCall is the body of an admin command: it connects to --controllers,
// asks within --timeout, and prints ask's answer as JSON for -o json, else
// with table. Errors come back as they are, for main to print as one line.
func adminCall[V any](cmd *cobra.Command, a *adminFlags,
	ask func(ctx context.Context, c *rpc.Client) (V, error),
	table func(w io.Writer, v V) error,
) error {
	return call(cmd, a.output, a.timeout, func(tlsCfg *tlsauth.Config) (*rpc.Client, error) { return openAdmin(a, tlsCfg) }, ask, table)
}

// openAdmin opens the client of an admin command: the --controllers, with
// the TLS flags, failing at once when none of them is listening.
func openAdmin(a *adminFlags, tlsCfg *tlsauth.Config) (*rpc.Client, error) {
	return rpc.NewClient(splitAddrs(a.controllers), rpc.WithTLS(tlsCfg), rpc.FailFast())
}

// call is adminCall for any client, opened by open with the TLS flags. -o is
// checked before anything is dialled, so a typo in it costs no connection.
func call[C io.Closer, V any](cmd *cobra.Command, output string, timeout time.Duration,
	open func(*tlsauth.Config) (C, error),
	ask func(ctx context.Context, c C) (V, error),
	table func(w io.Writer, v V) error,
) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	if err := checkTimeout(timeout); err != nil {
		return err
	}
	tlsCfg, err := tlsFlags(cmd)
	if err != nil {
		return err
	}
	c, err := open(tlsCfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	v, err := ask(ctx, c)
	if err != nil {
		return err
	}
	return printAs(cmd.OutOrStdout(), output, v, table)
}

// checkTimeout refuses a --timeout that leaves no time to ask: 0 would fail
// every call at once with a deadline error that reads like a dead cluster.
func checkTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration, e.g. 10s", d)
	}
	return nil
}
