package keelproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The lifecycle tests run the real keel binary: KEEL_BIN, or one built
// once, on first use, into a directory TestMain removes.
var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

// TestMain also checks that no goroutine outlives the tests: each process
// has one until it is reaped, so a leak is a process some test left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "keelproc:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// keelBinary returns a keel executable, building it the first time.
func keelBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("KEEL_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "keelproc-"); buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "keel")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/keel-dev/keel/cmd/keel").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/keel: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// fakeKeel writes a shell script to stand in for keel and returns its path.
func fakeKeel(t *testing.T, script string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "keel")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"+script), 0o700); err != nil {
		t.Fatal(err)
	}
	return exe
}

// closeCluster stops what c started, failing t unless every process
// exited cleanly.
func closeCluster(t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

func mustNew(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStart_GivesUpOnTakenPorts: controllers that keep failing to bind are
// started again on other ports, Attempts times in all, and then the error
// says so; nothing is left running.
func TestStart_GivesUpOnTakenPorts(t *testing.T) {
	exe := fakeKeel(t, "echo 'keel: listen tcp 127.0.0.1:1: bind: address already in use' >&2\nexit 1\n")
	var retries []error
	c := mustNew(t, Config{Keel: exe, Controllers: 3, Attempts: 3, Retrying: func(err error) { retries = append(retries, err) }})
	defer closeCluster(t, c)
	err := c.Start(context.Background())
	if !errors.Is(err, ErrPortTaken) || !strings.Contains(err.Error(), "exited before it started") {
		t.Fatalf("Start = %v, want ErrPortTaken naming the exited controller", err)
	}
	if len(retries) != 2 {
		t.Fatalf("%d retries, want 2: %v", len(retries), retries)
	}
	for _, nd := range c.Controllers() {
		if nd.Running() {
			t.Errorf("%s still running after the failed start", nd.Name())
		}
	}
	log, err := c.Controller(1).LogTail(100)
	if err != nil || strings.Count(log, "address already in use") != 3 {
		t.Fatalf("controller 1's log (%v):\n%s\nwant each attempt's bind error", err, log)
	}
}

// TestStart_ExitBeforeStartedIsNotRetried: a controller that exits for any
// other reason fails the start at once, with the end of its output.
func TestStart_ExitBeforeStartedIsNotRetried(t *testing.T) {
	exe := fakeKeel(t, "echo 'keel: bad flag' >&2\nexit 2\n")
	retried := false
	c := mustNew(t, Config{Keel: exe, Controllers: 1, Retrying: func(error) { retried = true }})
	defer closeCluster(t, c)
	err := c.Start(context.Background())
	if err == nil || errors.Is(err, ErrPortTaken) || !strings.Contains(err.Error(), "status 2") || !strings.Contains(err.Error(), "keel: bad flag") {
		t.Fatalf("Start = %v, want controller 1's exit status and output", err)
	}
	if retried {
		t.Fatal("Start retried an exit that was not a taken port")
	}
}

// TestStartBrokers_MovesToAnotherPort: a broker whose port was taken is
// started again on another, with --listen changed and nothing else.
func TestStartBrokers_MovesToAnotherPort(t *testing.T) {
	count := filepath.Join(t.TempDir(), "broker-starts")
	exe := fakeKeel(t, `case "$1" in
controller) echo 'level=INFO msg="controller started"'; exec sleep 60 ;;
broker)
	n=$(cat `+count+` 2>/dev/null || echo 0); echo $((n+1)) > `+count+`
	if [ "$n" -lt 1 ]; then echo 'keel: listen tcp: bind: address already in use' >&2; exit 1; fi
	echo 'level=INFO msg="broker started"'; exec sleep 60 ;;
esac
exit 3
`)
	var retries []error
	c := mustNew(t, Config{Keel: exe, Controllers: 1, Retrying: func(err error) { retries = append(retries, err) }})
	defer closeCluster(t, c)
	defer func() { _ = c.Kill(c.Nodes()...) }() // sleep exits on SIGTERM with no status 0
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBrokers(context.Background(), BrokerSpec{ID: 7, Rack: "r7", Metrics: true}); err != nil {
		t.Fatal(err)
	}
	b := c.Broker(7)
	if len(retries) != 1 || !errors.Is(retries[0], ErrPortTaken) {
		t.Fatalf("retries: %v; want one for the taken port", retries)
	}
	args := b.Args()
	want := BrokerArgs{ID: 7, Listen: b.Addr(), DataDir: b.DataDir(), Controllers: c.VoterAddrs(), Rack: "r7", MetricsAddr: b.MetricsAddr()}.Build()
	if !slices.Equal(args, want) {
		t.Fatalf("broker args after the move:\n  %q\nwant\n  %q", args, want)
	}
	if err := c.StartBrokers(context.Background(), BrokerSpec{ID: 7}); err == nil {
		t.Fatal("StartBrokers started broker 7 twice")
	}
}

// TestCluster_Lifecycle runs a real keel controller and broker through
// everything the harness does to a process: start, kill -9, restart, pause,
// resume, stop, start again, and a clean Close.
func TestCluster_Lifecycle(t *testing.T) {
	c := mustNew(t, Config{Keel: keelBinary(t), Controllers: 1, Metrics: true, Retrying: func(err error) { t.Log(err) }})
	defer closeCluster(t, c)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ctrl := c.Controller(1)
	if c.Controller(2) != nil || !slices.Equal(c.Live(), []int32{1}) {
		t.Fatalf("controllers %v, live %v; want controller 1 alone, live", c.Controllers(), c.Live())
	}
	if want := "1@" + ctrl.Addr(); c.Voters() != want || ctrl.MetricsAddr() == "" || ctrl.MetricsAddr() == ctrl.Addr() {
		t.Fatalf("voters %q (want %q), metrics %q", c.Voters(), want, ctrl.MetricsAddr())
	}
	if err := c.StartBrokers(ctx, BrokerSpec{ID: 1, Heartbeat: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	b := c.Broker(1)

	first := ctrl.Pid()
	if err := c.Kill(ctrl, b); err != nil {
		t.Fatal(err)
	}
	if ctrl.Running() || b.Running() || ctrl.ExitCode() != -1 || len(c.Live()) != 0 {
		t.Fatalf("after kill -9: running %v/%v, exit code %d, live %v", ctrl.Running(), b.Running(), ctrl.ExitCode(), c.Live())
	}
	if err := c.Kill(ctrl); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Kill of a dead node = %v, want ErrNotRunning", err)
	}

	if err := c.StartNodes(ctx, ctrl, b); err != nil {
		t.Fatal(err)
	}
	if ctrl.Pid() == first || !ctrl.Running() || !b.Running() {
		t.Fatalf("after the restart: pid %d (was %d), running %v/%v", ctrl.Pid(), first, ctrl.Running(), b.Running())
	}
	if n := strings.Count(ctrl.Output(), `msg="controller started"`); n != 1 {
		t.Fatalf("the restarted controller's output says it started %d times, want once: its output is its own", n)
	}
	if err := c.StartNodes(ctx, ctrl); err == nil {
		t.Fatal("StartNodes started a running node")
	}

	if err := c.Pause(ctrl); err != nil {
		t.Fatal(err)
	}
	if !ctrl.Paused() || len(c.Live()) != 0 {
		t.Fatalf("paused %v, live %v", ctrl.Paused(), c.Live())
	}
	if err := c.Pause(ctrl); err == nil {
		t.Fatal("Pause paused a paused node")
	}
	if err := c.Resume(ctrl); err != nil {
		t.Fatal(err)
	}
	if ctrl.Paused() || !slices.Equal(c.Live(), []int32{1}) {
		t.Fatalf("after Resume: paused %v, live %v", ctrl.Paused(), c.Live())
	}

	if err := c.Stop(b, ctrl); err != nil {
		t.Fatal(err)
	}
	if ctrl.ExitCode() != 0 || b.ExitCode() != 0 {
		t.Fatalf("exit codes after SIGTERM: %d, %d", ctrl.ExitCode(), b.ExitCode())
	}
	if err := c.StartNodes(ctx, ctrl); err != nil {
		t.Fatal(err)
	}
	// Paused at Close: it is resumed so that its SIGTERM is handled.
	if err := c.Pause(ctrl); err != nil {
		t.Fatal(err)
	}
}

// TestStartJoiner: a controller started with --join is the next id, with a
// data dir of its own, and counts as one of the controllers from then on.
func TestStartJoiner(t *testing.T) {
	c := mustNew(t, Config{Keel: keelBinary(t), Controllers: 1})
	defer closeCluster(t, c)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	j, err := c.StartJoiner(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if j.ID() != 2 || c.Controller(2) != j || !slices.Contains(j.Args(), "--join") || slices.Contains(j.Args(), "--voters") {
		t.Fatalf("joiner id %d, args %q", j.ID(), j.Args())
	}
	if got := c.Addrs(); !slices.Equal(got, []string{c.Controller(1).Addr(), j.Addr()}) {
		t.Fatalf("Addrs() = %v", got)
	}
}
