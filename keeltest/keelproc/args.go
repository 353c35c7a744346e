package keelproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
//
// The ports come from below the kernel's ephemeral range
// (ip_local_port_range), where a listener on :0 and a connection's own end
// are never put: a port picked from that range, freed and handed to a
// process to bind later, could meanwhile become the test's own fault proxy
// or a dial's source port (a broker's --kafka-listen was taken so, five
// starts in a row, by the proxy the same test opened after picking it). A
// port is handed out once per process.
func FreeAddrs(n int) ([]string, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := listenFree()
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}

// The ports FreeAddrs picks from: [freeLow, the ephemeral range's start).
const freeLow = 10000

var (
	freeMu   sync.Mutex
	freeUsed = map[int]bool{} // handed out by this process
	freeHigh = ephemeralStart()
)

// listenFree listens on a loopback port below the ephemeral range that
// this process has not handed out, or on :0 where there is no such range.
func listenFree() (net.Listener, error) {
	freeMu.Lock()
	defer freeMu.Unlock()
	for tries := 0; freeHigh > freeLow && tries < 200; tries++ {
		port := freeLow + rand.IntN(freeHigh-freeLow)
		if freeUsed[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by another process
		}
		freeUsed[port] = true
		return ln, nil
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralStart is the first port of Linux's ephemeral range, or 0 where
// it cannot be read (then FreeAddrs takes the kernel's :0 ports).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= freeLow {
		return 0
	}
	return lo
}
