package keelproc

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ControllerArgs is the command line of one `keel controller`.
type ControllerArgs struct {
	ID      int32
	Listen  string
	DataDir string
	// Voters is the --voters list; with Join the controller is started
	// with --join instead, to wait until it is added.
	Voters string
	Join   bool
	// ClusterID, RaftDial and MetricsAddr are passed when set.
	ClusterID   string
	RaftDial    string
	MetricsAddr string
	// Flags come last, so that they can override any of the above.
	Flags []string
}

// Build returns the arguments, the subcommand first.
func (a ControllerArgs) Build() []string {
	args := []string{"controller",
		"--node-id", strconv.Itoa(int(a.ID)),
		"--listen", a.Listen,
		"--data-dir", a.DataDir,
	}
	if a.Join {
		args = append(args, "--join")
	} else {
		args = append(args, "--voters", a.Voters)
	}
	if a.ClusterID != "" {
		args = append(args, "--cluster-id", a.ClusterID)
	}
	if a.RaftDial != "" {
		args = append(args, "--raft-dial", a.RaftDial)
	}
	if a.MetricsAddr != "" {
		args = append(args, "--metrics-addr", a.MetricsAddr)
	}
	return append(args, a.Flags...)
}

// BrokerArgs is the command line of one `keel broker`.
type BrokerArgs struct {
	ID          int32
	Listen      string
	DataDir     string
	Controllers []string
	// Heartbeat, Rack and MetricsAddr are passed when set.
	Heartbeat   time.Duration
	Rack        string
	MetricsAddr string
	// Flags come last, so that they can override any of the above.
	Flags []string
}

// Build returns the arguments, the subcommand first.
func (a BrokerArgs) Build() []string {
	args := []string{"broker",
		"--broker-id", strconv.Itoa(int(a.ID)),
		"--listen", a.Listen,
		"--data-dir", a.DataDir,
		"--controllers", strings.Join(a.Controllers, ","),
	}
	if a.Heartbeat != 0 {
		args = append(args, "--heartbeat-interval", a.Heartbeat.String())
	}
	if a.Rack != "" {
		args = append(args, "--rack", a.Rack)
	}
	if a.MetricsAddr != "" {
		args = append(args, "--metrics-addr", a.MetricsAddr)
	}
	return append(args, a.Flags...)
}

// setFlag returns args with the value of the first `flag VALUE` replaced
// by value, or args unchanged when flag is not there: how a broker moves to
// another port without losing flags a caller set by hand (Node.SetArgs).
func setFlag(args []string, flag, value string) []string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return args
	}
	args = slices.Clone(args)
	args[i+1] = value
	return args
}

// FreeAddrs returns n distinct loopback addresses (127.0.0.1:port) whose
// ports were free a moment ago. They are held open together, so no two are
// the same; another process may still take one before its user binds it,
// which is why the cluster starts again on other ports when that happens.
func FreeAddrs(n int) ([]string, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}
