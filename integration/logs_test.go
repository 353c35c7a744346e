package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// Normal operation logs no ERROR line, and every line in one format with
// its fields: a keel dev cluster, a topic, a leadership handoff, a snapshot
// restore, then a clean Ctrl-C.
func TestLogs_NormalOperationIsCleanJSON(t *testing.T) {
	var stdout, stderr syncBuffer
	cmd := exec.Command(keelBin, "dev", "--base-port", "0", "--log-format", "json", "--data-dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	var controllers string
	poll.Until(t, 60*time.Second, "keel dev to print its addresses", func() bool {
		m := exportControllers.FindStringSubmatch(stdout.String())
		if m != nil {
			controllers = m[1]
		}
		return m != nil
	})
	admin := func(args ...string) string {
		t.Helper()
		out, errOut, code := runKeel(t, 60*time.Second, append(args, "--controllers", controllers)...)
		if code != 0 {
			t.Fatalf("keel %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	poll.Until(t, 60*time.Second, "three active brokers", func() bool {
		out, _, code := runKeel(t, 30*time.Second, "broker", "list", "--controllers", controllers, "-o", "json")
		return code == 0 && strings.Count(out, `"active"`) == 3
	})
	admin("topic", "create", "orders", "--partitions", "3", "--replication-factor", "3")
	admin("quorum", "transfer-leadership")
	admin("quorum", "verify")
	snap := t.TempDir() + "/keel.snap"
	admin("snapshot", "save", snap)
	admin("snapshot", "restore", snap)
	admin("quorum", "verify")

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("keel dev after Ctrl-C: %v\n%s", err, tail(stderr.String(), 40))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("keel dev did not stop within 60s of Ctrl-C\n%s", tail(stderr.String(), 40))
	}

	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if rec["level"] == "ERROR" {
			t.Errorf("an ERROR line in normal operation: %s", line)
		}
		for k, v := range rec {
			if m, ok := v.(map[string]any); ok && len(m) == 0 {
				t.Errorf("field %q rendered as {}: %s", k, line)
			}
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "fetch from the leader") && rec["broker_id"] == nil {
			t.Errorf("a broker's line without its broker_id: %s", line)
		}
	}
	if n == 0 {
		t.Fatalf("keel dev logged nothing")
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintln(strings.Join(lines, "\n"))
}
