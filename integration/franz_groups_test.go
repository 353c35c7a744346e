package integration

// franz-go's own consumer-group tests against Keel (issue 30): pkg/kgo's
// TestGroupETL (a chain of groups whose members join and leave while a
// producer writes, every record consumed once and in order, with each
// balancer, static membership too), TestGroupSimple, TestIssue523 (a
// regex group whose topic is deleted under it), TestIssue1034 (batched
// FindCoordinator) and TestConsumeRegex (a regex group that skips internal
// topics), run by `go test` on the franz-go module this one requires,
// against a `keel dev` of 3 controllers and 3 brokers (plaintext,
// temporary data). Their KIP-848 cases skip themselves: Keel does not
// serve ConsumerGroupHeartbeat.
//
// `make test-franz-groups` runs it (KEEL_FRANZ_GROUPS=1); elsewhere it is
// skipped: it compiles franz-go's test package.

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// franzGroupsEnv, set, runs TestFranzGo_GroupTests.
	franzGroupsEnv = "KEEL_FRANZ_GROUPS"
	// franzRecordsEnv overrides franzRecords.
	franzRecordsEnv = "KEEL_FRANZ_RECORDS"
	// franzRecords is KGO_TEST_RECORDS, the records TestGroupETL
	// produces and each group of its chain consumes (franz-go's own
	// default is 500,000): a few minutes on a shared machine.
	franzRecords = "20000"
	// franzTimeout bounds franz-go's tests (go test -timeout).
	franzTimeout = 5 * time.Minute
	// franzGroupTests are the tests of pkg/kgo run: the group tests the
	// issue saw fail ("broker is too old", no __consumer_offsets).
	franzGroupTests = "^(TestGroupETL|TestGroupSimple|TestIssue523|TestIssue1034|TestConsumeRegex)$"
)

// TestFranzGo_GroupTests runs `go test -race -run franzGroupTests
// github.com/twmb/franz-go/pkg/kgo` with KGO_SEEDS at a fresh `keel dev
// --brokers-count 3`, and fails if they do; each subtest's outcome is
// logged.
func TestFranzGo_GroupTests(t *testing.T) {
	if os.Getenv(franzGroupsEnv) == "" {
		t.Skipf("franz-go's group tests run with %s=1: make test-franz-groups", franzGroupsEnv)
	}
	dev := startDev(t, "--base-port", "0", "--controllers-count", "3", "--brokers-count", "3")
	m := exportBootstrap.FindStringSubmatch(dev.stdout.String())
	if m == nil {
		t.Fatalf("keel dev's banner has no export KEEL_BOOTSTRAP line:\n%s", dev.stdout)
	}
	records := franzRecords
	if n := os.Getenv(franzRecordsEnv); n != "" {
		records = n
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), franzTimeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-race", "-count=1", "-v", "-timeout", franzTimeout.String(),
		"-run", franzGroupTests, "github.com/twmb/franz-go/pkg/kgo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KGO_SEEDS="+m[1], "KGO_TEST_RF=3", "KGO_TEST_RECORDS="+records, "KGO_LOG_LEVEL=none")
	// go test runs the test binary as its child: at the deadline, kill
	// both, by the process group go test leads.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	var outcomes []string
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL") {
			outcomes = append(outcomes, l)
		}
	}
	t.Logf("franz-go's group tests against keel dev (%s, KGO_TEST_RECORDS=%s), %s:\n%s", m[1], records,
		time.Since(start).Round(time.Second), strings.Join(outcomes, "\n"))
	if err != nil {
		t.Fatalf("go test github.com/twmb/franz-go/pkg/kgo: %v\n%s", err, tail(out.String(), 300))
	}
}
