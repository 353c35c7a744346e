package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/keeltest/keelproc"
)

// devAddrLines are the banner's lines that give addresses: one per node
// ("  controller 1  ADDR ...", "  broker 1      ADDR  kafka ADDR ...") and
// the notes on ports that moved ("  (9092 is taken: ...)").
func (d *devRun) devAddrLines(t *testing.T) []string {
	t.Helper()
	var out []string
	for l := range strings.Lines(d.stdout.String()) {
		if strings.HasPrefix(l, "  controller ") || strings.HasPrefix(l, "  broker ") || strings.HasPrefix(l, "  (") {
			out = append(out, strings.TrimRight(l, "\n"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("keel dev's banner lists no addresses:\n%s", d.stdout)
	}
	return out
}

// TestDev_DataDirKeepsEveryAddress: `keel dev --data-dir D` run again
// listens where the first run did, every listener: the controllers, the
// brokers, their Kafka listeners (the KEEL_BOOTSTRAP a user exported) and
// the metrics servers, though each first took a free port.
func TestDev_DataDirKeepsEveryAddress(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	args := []string{"--data-dir", dir, "--base-port", "0", "--controllers-count", "1", "--brokers-count", "2", "--metrics"}
	first := startDev(t, args...)
	want := first.devAddrLines(t)
	wantBootstrap := exportBootstrap.FindStringSubmatch(first.stdout.String())
	// While the first runs, a second is refused in one line naming a
	// saved address, the file, and the process that holds it.
	_, stderr, code := runKeel(t, time.Minute, append([]string{"dev"}, args...)...)
	if by := fmt.Sprintf("address already in use by keel (pid %d)", first.cmd.Process.Pid); code != 1 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 ||
		!strings.Contains(stderr, by) || !strings.Contains(stderr, filepath.Join(dir, "dev.json")) {
		t.Errorf("keel dev on a data dir in use: exit %d, stderr %q; want exit 1 and one line naming dev.json and %q", code, stderr, by)
	}
	first.stop(t)

	second := startDev(t, args...)
	if got := second.devAddrLines(t); !slices.Equal(got, want) {
		t.Errorf("the second run's addresses:\n%s\nwant the first run's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := exportBootstrap.FindStringSubmatch(second.stdout.String()); !slices.Equal(got, wantBootstrap) {
		t.Errorf("the second run exports KEEL_BOOTSTRAP %q, want the first run's %q", got, wantBootstrap)
	}
	second.stop(t)
}

// TestDev_PortLayoutFromBasePort: with --base-port B, the brokers' Kafka
// listeners are at B and up, the controllers 100 above, the brokers 200,
// the metrics 300 and 400; a port another process holds moves to a free
// one, which the banner names and KEEL_BOOTSTRAP exports.
func TestDev_PortLayoutFromBasePort(t *testing.T) {
	t.Parallel()
	base, err := keelproc.FreeBlock(0, 1, 100, 200, 201, 300, 400, 401)
	if err != nil {
		t.Fatal(err)
	}
	// Broker 2's Kafka port, held by a stranger.
	held, err := net.Listen("tcp", addrAt(base+1))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// No --metrics: keel dev serves metrics (and a controller's console)
	// by default, as `make run` does.
	d := startDev(t, "--base-port", strconv.Itoa(base), "--controllers-count", "1", "--brokers-count", "2")
	moved := regexp.MustCompile(fmt.Sprintf(`^  \(%d is taken \(address already in use by \S+ \(pid %d\)\): broker 2's Kafka listener is at (127\.0\.0\.1:\d+)\)$`, base+1, os.Getpid()))
	lines := d.devAddrLines(t)
	if len(lines) != 4 {
		t.Fatalf("keel dev's banner gives %d address lines, want 4:\n%s", len(lines), d.stdout)
	}
	m := moved.FindStringSubmatch(lines[3])
	if m == nil {
		t.Fatalf("keel dev's banner does not say that %d was taken, by this test, and where broker 2's Kafka listener went:\n%s", base+1, d.stdout)
	}
	want := []string{
		fmt.Sprintf("  controller 1  %s  metrics http://%s/metrics", addrAt(base+100), addrAt(base+300)),
		fmt.Sprintf("  broker 1      %s  kafka %s  metrics http://%s/metrics", addrAt(base+200), addrAt(base), addrAt(base+400)),
		fmt.Sprintf("  broker 2      %s  kafka %s  metrics http://%s/metrics", addrAt(base+201), m[1], addrAt(base+401)),
	}
	// Each line starts so: what follows (a console's address) is not the
	// layout's.
	if !slices.EqualFunc(lines[:3], want, strings.HasPrefix) {
		t.Errorf("keel dev --base-port %d lists:\n%s\nwant lines starting:\n%s", base, strings.Join(lines[:3], "\n"), strings.Join(want, "\n"))
	}
	if got, want := exportBootstrap.FindStringSubmatch(d.stdout.String()), addrAt(base)+","+m[1]; got == nil || got[1] != want {
		t.Errorf("keel dev exports KEEL_BOOTSTRAP %q, want %s", got, want)
	}
	d.stop(t)
}

// TestDev_KafkaAt9092: with nothing on the default ports, `keel dev` as
// `make run` starts it serves Kafka at 127.0.0.1:9092, and its controllers
// are the admin commands' default --controllers: a command with no
// KEEL_CONTROLLERS reaches them. Other processes on this machine may hold
// those ports: the test is skipped then, as when one takes a port between
// the check and keel dev's start.
func TestDev_KafkaAt9092(t *testing.T) {
	// Not parallel: it runs before this package's parallel tests start,
	// none of which should meet Kafka's well-known port taken by it.
	for _, p := range []int{9092, 9192, 9292, 9392, 9492} {
		ln, err := net.Listen("tcp", addrAt(p))
		if err != nil {
			t.Skipf("port %d is taken on this machine (%v): keel dev would move, as TestDev_PortLayoutFromBasePort checks", p, err)
		}
		ln.Close()
	}
	d := startDev(t, "--controllers-count", "1", "--brokers-count", "1")
	if strings.Contains(d.stdout.String(), " is taken: ") {
		t.Skipf("a default port was taken as keel dev started:\n%s", d.stdout)
	}
	lines := d.devAddrLines(t)
	// What follows (the metrics address) is not the test's.
	if want := "  broker 1      127.0.0.1:9292  kafka 127.0.0.1:9092 "; len(lines) != 2 || !strings.HasPrefix(lines[1], want) {
		t.Errorf("keel dev lists:\n%s\nwant broker 1 starting %q", strings.Join(lines, "\n"), want)
	}
	cmd := exec.Command(keelBin, "broker", "list")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KEEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "127.0.0.1:9092") {
		t.Errorf("keel broker list with the default --controllers: %v\n%s", err, out)
	}
	d.stop(t)
}

func addrAt(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
