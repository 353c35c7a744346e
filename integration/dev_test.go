package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// devRun is one `keel dev` process.
type devRun struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan error
}

// startDev starts `keel dev` with args and waits for its banner. The
// process is interrupted (then killed) when the test ends, if still running.
func startDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	d := &devRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(keelBin, append([]string{"dev"}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	poll.Until(t, 60*time.Second, "keel dev's banner", func() bool {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("keel dev exited before its banner: %v\nstdout:\n%s\nstderr:\n%s", err, d.stdout, d.stderr)
		default:
		}
		return strings.Contains(d.stdout.String(), "Ctrl-C stops the cluster.")
	})
	return d
}

// stop interrupts the process, as Ctrl-C does, and waits for it to exit.
func (d *devRun) stop(t *testing.T) {
	t.Helper()
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("keel dev after Ctrl-C: %v\nstderr:\n%s", err, d.stderr)
		}
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("keel dev did not stop within 60s of SIGINT")
	}
}

var exportControllers = regexp.MustCompile(`(?m)^  export KEEL_CONTROLLERS=(\S+)$`)

// controllers is the KEEL_CONTROLLERS the banner exports.
func (d *devRun) controllers(t *testing.T) string {
	t.Helper()
	m := exportControllers.FindStringSubmatch(d.stdout.String())
	if m == nil {
		t.Fatalf("keel dev's banner has no export KEEL_CONTROLLERS line:\n%s", d.stdout)
	}
	return m[1]
}

// devBrokerMetrics finds broker 1's metrics address in the banner of
// keel dev --metrics.
var devBrokerMetrics = regexp.MustCompile(`(?m)^  broker 1 .* metrics http://(\S+)/metrics$`)

var exportBootstrap = regexp.MustCompile(`(?m)^  export KEEL_BOOTSTRAP=(\S+)`)

// pasted runs one of the banner's command lines as a shell would after
// the banner's exports: KEEL_CONTROLLERS and KEEL_BOOTSTRAP set, nothing
// else given. A line `echo 'TEXT' | keel ...` gets TEXT on its stdin.
func pasted(t *testing.T, controllers string, line string) string {
	t.Helper()
	var stdin string
	if rest, ok := strings.CutPrefix(line, "echo '"); ok {
		text, cmdLine, found := strings.Cut(rest, "' | ")
		if !found {
			t.Fatalf("banner line %q: an echo without a pipe", line)
		}
		stdin, line = text+"\n", cmdLine
	}
	fields := strings.Fields(line)
	cmd := exec.Command(fields[0], fields[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "KEEL_CONTROLLERS="+controllers, "KEEL_BOOTSTRAP="+bannerBootstrap)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

// bannerBootstrap is the KEEL_BOOTSTRAP of the banner being pasted.
var bannerBootstrap string

// TestDev_BannerCommandsPasteAndDataDirRestarts: the banner's commands run
// as printed; a second `keel dev` on the same data dir starts the same
// cluster on the same addresses, with its topics, and one started while the
// first runs is refused in one line.
func TestDev_BannerCommandsPasteAndDataDirRestarts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	args := []string{"--data-dir", dir, "--base-port", "0", "--controllers-count", "3", "--brokers-count", "1"}
	// The first run serves each node's metrics too.
	first := startDev(t, append(slices.Clone(args), "--metrics")...)
	controllers := first.controllers(t)
	m := exportBootstrap.FindStringSubmatch(first.stdout.String())
	if m == nil {
		t.Fatalf("keel dev's banner has no export KEEL_BOOTSTRAP line:\n%s", first.stdout)
	}
	bannerBootstrap = m[1]
	// The banner's commands, as printed, with the exported variables:
	// topics, then a record produced and consumed through the Kafka
	// listeners.
	var lines []string
	for l := range strings.Lines(first.stdout.String()) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, keelBin+" ") || strings.HasPrefix(l, "echo '") && strings.Contains(l, "| "+keelBin+" ") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 3 {
		t.Fatalf("keel dev's banner has %d commands starting %q:\n%s", len(lines), keelBin, first.stdout)
	}
	for _, l := range lines {
		pasted(t, controllers, l)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, " consume ") }) {
		t.Fatalf("keel dev's banner has no consume line:\n%s", first.stdout)
	}
	if out := pasted(t, controllers, keelBin+" topic describe orders"); !strings.Contains(out, "Topic:   orders") {
		t.Fatalf("topic describe orders after the banner's create:\n%s", out)
	}
	// The broker's Kafka listener timed the banner's produce on the
	// broker's metrics.
	mm := devBrokerMetrics.FindStringSubmatch(first.stdout.String())
	if mm == nil {
		t.Fatalf("keel dev --metrics: the banner gives broker 1 no metrics address:\n%s", first.stdout)
	}
	produces := `keel_kafka_request_duration_seconds{request="Produce"}`
	poll.Until(t, 10*time.Second, "broker 1's metrics count the banner's produce", func() bool {
		seen, err := scrapeMetrics(mm[1])
		return err == nil && seen[produces] >= 1
	})
	// A dev broker is assembled as keel broker's is (broker/node): its
	// data plane's metrics are there too.
	if seen, err := scrapeMetrics(mm[1]); err != nil {
		t.Fatal(err)
	} else if _, ok := seen["keel_broker_log_scrub_bytes_total"]; !ok {
		t.Errorf("keel dev --metrics: broker 1 serves no keel_broker_log_scrub_bytes_total, the data plane's metric")
	}

	// A second run on the same data dir while the first holds its ports.
	_, stderr, code := runKeel(t, 60*time.Second, append([]string{"dev"}, args...)...)
	if code != 1 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "address already in use") ||
		!strings.Contains(stderr, filepath.Join(dir, "dev.json")) {
		t.Errorf("keel dev on a data dir in use: exit %d, stderr %q; want exit 1 and one line naming the address and dev.json", code, stderr)
	}

	first.stop(t)
	second := startDev(t, args...)
	if got := second.controllers(t); got != controllers {
		t.Errorf("second run's controllers = %s, want the first run's %s", got, controllers)
	}
	if out := pasted(t, controllers, keelBin+" topic list"); !strings.Contains(out, "orders") {
		t.Errorf("topic list on the second run lacks the first run's topic:\n%s", out)
	}
	second.stop(t)

	// Another count of controllers on the same data dir is refused.
	_, stderr, code = runKeel(t, 60*time.Second, "dev", "--data-dir", dir, "--controllers-count", "1")
	if code != 1 || !strings.Contains(stderr, "--controllers-count 1: the dev cluster in "+dir+" has 3 controllers") {
		t.Errorf("keel dev with another --controllers-count: exit %d, stderr %q", code, stderr)
	}
}
