package integration

// Plaintext is a choice: a controller or broker without TLS refuses to
// start on an address that is not loopback unless --insecure says so, and
// then warns.

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// insecureWarning is what a process started with --insecure on an address
// that is not loopback logs at WARN.
const insecureWarning = "running without TLS (--insecure) on an address that is not loopback: nothing is authenticated, and anyone who can reach the ports, or the network between them, can forge metadata"

// TestInsecure_RefusedOffLoopback: without TLS, a controller listening on
// every interface and a broker serving its metrics on every interface each
// exit with status 1 and one line naming the address and the two ways out,
// leaving the port free.
func TestInsecure_RefusedOffLoopback(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	wide := net.JoinHostPort("0.0.0.0", port)
	expectRefused(t, wide, controllerArgs(1, wide, filepath.Join(t.TempDir(), "data"), "1@"+addr),
		"keel: --listen "+wide+" is not a loopback address and TLS is off: give --tls-cert, --tls-key and --tls-ca (keel cert makes them), or --insecure to run plaintext anyway")

	args := append(brokerArgs(1, addr, filepath.Join(t.TempDir(), "b1"), []string{freeAddr(t)}), "--metrics-addr", "0.0.0.0:0")
	expectRefused(t, addr, args, "keel: --metrics-addr 0.0.0.0:0 is not a loopback address and TLS is off", "--insecure")

	pki := newTestPKI(t)
	expectRefused(t, addr, append(controllerArgs(1, addr, filepath.Join(t.TempDir(), "data"), "1@"+addr, "--insecure"), pki.flags("controller-1")...),
		"keel: --insecure and --tls-cert, --tls-key, --tls-ca contradict each other")
}

// TestInsecure_StartsOnEveryInterface: with --insecure, a controller
// listening on every interface starts, warns, and serves (at the machine's
// own non-loopback address too, when it has one); a broker with --insecure
// and its metrics on every interface registers with it.
func TestInsecure_StartsOnEveryInterface(t *testing.T) {
	c := startCluster(t, 1, withDeferred(1))
	nd := c.node(1)
	_, port, _ := net.SplitHostPort(nd.Addr())
	wide := net.JoinHostPort("0.0.0.0", port)
	nd.SetArgs(append(nd.Args(), "--listen", wide, "--insecure")) // the last --listen wins
	c.Start(1)
	c.WaitForActive(t, activeTimeout)
	if out := nd.Output(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, insecureWarning) || !strings.Contains(out, "--listen "+wide) {
		t.Errorf("the controller's log has no warning %q naming --listen %s:\n%s", insecureWarning, wide, keelproc.LastLines(out, 10))
	}

	if ip := nonLoopbackIP(); ip == nil {
		t.Log("this machine has no non-loopback address: the controller was reached on loopback only")
	} else {
		at := net.JoinHostPort(ip.String(), port)
		cl, err := rpc.NewClient([]string{at})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctrl, err := cl.Controller(at)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), describeLimit*5)
		defer cancel()
		if v, err := ctrl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil || !v.GetActive() {
			t.Errorf("DescribeQuorum at %s, the machine's own address: %v, %v; want the active controller", at, v, err)
		}
	}

	c.StartBroker(1, withBrokerFlags("--metrics-addr", "0.0.0.0:0", "--insecure"))
	c.WaitForBrokers(t, allActive(1))
	poll.UntilState(t, brokersTimeout, "broker 1 to warn that it runs insecure", func() (bool, string) {
		out := c.broker(1).Output()
		return strings.Contains(out, insecureWarning) && strings.Contains(out, "--metrics-addr 0.0.0.0:0"), keelproc.LastLines(out, 5)
	})
}

// nonLoopbackIP is an IPv4 address of one of this machine's interfaces
// that is up and not loopback, or nil.
func nonLoopbackIP() net.IP {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				return ipn.IP
			}
		}
	}
	return nil
}
