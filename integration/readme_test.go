package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
)

// readmeNotRun are the README's commands this test does not run, each with
// why. A command in a shell block that is neither run nor listed here does
// not exist: every other line runs.
var readmeNotRun = map[string]string{
	"make run":   "keel dev in the foreground until Ctrl-C: the test starts that keel dev itself (on the moved ports) and stops it where its section ends",
	"make test":  "the whole test suite, this test among it",
	"make build": "builds bin/keel: the test's bin/keel is the binary TestMain built",
}

// readmeLayoutPort is the first port of keel dev's layout, which the
// README's addresses follow; readmeLayoutSpan its ports.
const (
	readmeLayoutPort = 9092
	readmeLayoutSpan = 500
)

// readmeBlock is one ```sh block of README.md.
type readmeBlock struct {
	section string // the "## " heading it is under
	line    int    // of its first command, 1-based
	lines   []string
}

// readmeBlocks reads README.md's shell blocks in order.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur != nil && l == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case l == "```sh":
			cur = &readmeBlock{section: section, line: n + 1}
		case strings.HasPrefix(l, "## "):
			section = l
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md: the shell block at line %d is not closed", cur.line)
	}
	return blocks
}

// readmeCommand is a line's command without its comment: what
// readmeNotRun lists.
func readmeCommand(line string) string {
	if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

var readmeLoopbackAddr = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// readmeSubst is the whole of what the test changes in a command: the
// README's ports, keel dev's layout from 9092, move to the test's free
// block from base, and /tmp/keel to a directory of the test's.
func readmeSubst(line string, base int, tmp string) string {
	line = strings.ReplaceAll(line, "/tmp/keel", filepath.Join(tmp, "keel"))
	return readmeLoopbackAddr.ReplaceAllStringFunc(line, func(a string) string {
		p, _ := strconv.Atoi(a[len("127.0.0.1:"):])
		if p < readmeLayoutPort || p >= readmeLayoutPort+readmeLayoutSpan {
			return a
		}
		return addrAt(base + p - readmeLayoutPort)
	})
}

// readmeShell is one bash reading the README's commands from its stdin, in
// a directory whose bin/keel is the binary under test, so that `state
// (exports, functions, background processes) carries from block to block as
// in the reader's shell. It stops at the first command that fails (set -e).
type readmeShell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *syncBuffer
	done  chan error
	runs  int
}

func startReadmeShell(t *testing.T, dir string, env []string) *readmeShell {
	t.Helper()
	sh := &readmeShell{out: &syncBuffer{}, done: make(chan error, 1)}
	sh.cmd = exec.Command("bash", "-s")
	sh.cmd.Dir, sh.cmd.Env = dir, env
	sh.cmd.Stdout, sh.cmd.Stderr = sh.out, sh.out
	// Its own process group, the background processes' too: the test's
	// cleanup reaches every one of them.
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var err error
	if sh.stdin, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sh.done <- sh.cmd.Wait() }()
	t.Cleanup(func() { sh.kill() })
	sh.run(t, "set -e -o pipefail; PS4='+ '; set -x", time.Minute)
	return sh
}

// run writes script to the shell and waits until it has run, returning
// what it printed. A failing command (the shell exits) fails the test.
func (sh *readmeShell) run(t *testing.T, script string, timeout time.Duration) string {
	t.Helper()
	sh.runs++
	// printf, not echo: set -x traces "printf ... 3", never the marker
	// the output holds.
	marker := fmt.Sprintf("__readme_ran_%d\n", sh.runs)
	start := len(sh.out.String())
	if _, err := fmt.Fprintf(sh.stdin, "%s\nprintf '%%s_%%d\\n' __readme_ran %d\n", script, sh.runs); err != nil {
		t.Fatalf("the shell is gone: %v\n%s", err, sh.out)
	}
	poll.UntilState(t, timeout, "the README's commands to run", func() (bool, string) {
		select {
		case err := <-sh.done:
			sh.done <- err
			t.Fatalf("a README command failed (%v); the shell's trace, the failing command last:\n%s", err, keelproc.LastLines(sh.out.String(), 60))
		default:
		}
		out := sh.out.String()
		return strings.Contains(out[start:], marker), keelproc.LastLines(out, 60)
	})
	return strings.TrimSuffix(sh.out.String()[start:], marker)
}

// kill ends the shell's process group: whatever the README started in the
// background and the test did not stop.
func (sh *readmeShell) kill() {
	_ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL)
	<-sh.done
	sh.done <- nil
}

// TestReadme_CommandsRunAsPrinted runs every command of README.md's shell
// blocks, in order, in one bash, against real processes: keel dev where the
// README says `make run`, then the three-node cluster over mutual TLS. The
// only changes are readmeSubst's (ports moved to a free block, /tmp/keel to
// the test's directory); readmeNotRun lists what does not run and why. The
// defaults that name the layout's ports (--controllers, --bootstrap) move
// with them, as the variables the commands read. Where a block starts
// processes in the background, the next waits, as the README's "within a
// few seconds" does, until every broker it started is active.
func TestReadme_CommandsRunAsPrinted(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	// keel dev's layout of 3 controllers and 3 brokers, and the README's
	// cluster on the same ports.
	base, err := keelproc.FreeBlock(0, 1, 2, 100, 101, 102, 200, 201, 202)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(keelBin, filepath.Join(work, "bin", "keel")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KEEL_") {
			env = append(env, kv)
		}
	}
	controllers := fmt.Sprintf("%s,%s,%s", addrAt(base+100), addrAt(base+101), addrAt(base+102))
	env = append(env, "KEEL_CONTROLLERS="+controllers, "KEEL_BROKER_CONTROLLERS="+controllers, "KEEL_BOOTSTRAP="+addrAt(base))
	sh := startReadmeShell(t, work, env)

	var dev *devRun
	section, brokersStarted, waitBrokers := "", 0, false
	for _, b := range readmeBlocks(t) {
		if b.section != section && dev != nil {
			dev.stop(t) // Ctrl-C, before the next section's cluster takes the ports
			dev = nil
		}
		section = b.section
		var script []string
		for i, l := range b.lines {
			c := readmeCommand(l)
			why, listed := readmeNotRun[c]
			switch {
			case listed && c == "make run":
				dev = startDev(t, "--base-port", strconv.Itoa(base))
			case listed:
				t.Logf("README.md:%d: not run: %s: %s", b.line+i, c, why)
			default:
				script = append(script, readmeSubst(l, base, tmp))
				if strings.HasSuffix(c, "&") && strings.Contains(c, "keel broker ") {
					brokersStarted++
				}
			}
		}
		if waitBrokers {
			// The block's exports first: the admin certificate the wait
			// needs.
			n := 0
			for n < len(script) && strings.HasPrefix(script[n], "export ") {
				n++
			}
			sh.run(t, strings.Join(script[:n], "\n"), time.Minute)
			script = script[n:]
			want := brokersStarted
			poll.Until(t, time.Minute, fmt.Sprintf("the %d brokers the README started to be active", want), func() bool {
				out := sh.run(t, "bin/keel broker list 2>&1 || true", time.Minute)
				return strings.Count(out, " active\n") >= want
			})
			waitBrokers = false
		}
		out := sh.run(t, strings.Join(script, "\n"), time.Minute)
		if strings.Contains(strings.Join(b.lines, "\n"), " consume ") && !strings.Contains(out, "key user-1: hello") {
			t.Errorf("README.md:%d: the block's consume printed no record:\n%s", b.line, out)
		}
		waitBrokers = brokersStarted > 0 && slicesContainsSuffix(script, "&")
	}
	if brokersStarted == 0 {
		t.Fatalf("README.md starts no broker in the background: the test has lost its three-node cluster")
	}
	// The README's brokers serve Kafka: broker list names each one's
	// Kafka address.
	out := sh.run(t, "bin/keel broker list", time.Minute)
	for i := range brokersStarted {
		kafka := addrAt(base + i)
		if !slices.ContainsFunc(activeLines(out), func(l string) bool { return slices.Contains(strings.Fields(l), kafka) }) {
			t.Errorf("broker list shows no active broker with the Kafka address %s:\n%s", kafka, out)
		}
	}
	// As the README says: the brokers first, then the controllers.
	sh.run(t, "for p in $(jobs -p | tac); do kill $p; wait $p || true; done", 2*time.Minute)
}

// activeLines are out's lines that end in " active".
func activeLines(out string) []string {
	var lines []string
	for l := range strings.Lines(out) {
		if l = strings.TrimRight(l, "\n"); strings.HasSuffix(l, " active") {
			lines = append(lines, l)
		}
	}
	return lines
}

// slicesContainsSuffix says whether a line of lines, its comment left out,
// ends in suffix.
func slicesContainsSuffix(lines []string, suffix string) bool {
	for _, l := range lines {
		if strings.HasSuffix(readmeCommand(l), suffix) {
			return true
		}
	}
	return false
}
