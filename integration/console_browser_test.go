package integration

// The console in a real browser (issue 32): Debian's headless Chromium
// loads the console of a running `keel dev` cluster, runs its script, and
// the test reads what it rendered. `make test-clients` installs chromium
// and runs this test with KEEL_CLIENTS_REQUIRED=1; `make test` runs it
// only where chromium is installed (clients_test.go).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromiumPath finds Debian's chromium (or another distribution's name
// for it); without it the test is skipped, unless KEEL_CLIENTS_REQUIRED.
func chromiumPath(t *testing.T) string {
	t.Helper()
	var firstErr error
	for _, name := range []string{"chromium", "chromium-browser"} {
		p, err := exec.LookPath(name)
		if err == nil {
			return p
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	clientMissing(t, "chromium", "chromium", firstErr)
	return ""
}

// chromiumTimeout bounds one headless run: start, the page's fetches,
// and the virtual time its refreshes take.
const chromiumTimeout = 90 * time.Second

// runChromium runs headless chromium with args then url, in a profile of
// its own, and returns its stdout; the test fails unless it exits 0.
func runChromium(t *testing.T, chromium, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(),
		// Time enough for the script's first fetches and a refresh;
		// virtual time waits for the network.
		"--virtual-time-budget=8000"}, args...)
	cmd := exec.CommandContext(ctx, chromium, append(all, url)...)
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s %s: %v\nstderr:\n%s", strings.Join(args, " "), url, err, lastLines(errOut.String(), 20))
	}
	return out.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// devConsole finds controller N's console in the banner of keel dev
// --metrics.
var devConsole = regexp.MustCompile(`(?m)^  controller (\d+) .* console (http://\S+/console/)$`)

// TestConsole_Browser: a `keel dev --metrics` cluster of 3 controllers and
// 3 brokers with a topic; Chromium renders the active controller's console
// with every broker, the topic and the controller named active, and a
// follower's saying whose view it is; a screenshot of each is saved and
// its path logged (KEEL_SCREENSHOT_DIR, else the test's temporary dir).
func TestConsole_Browser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	d := startDev(t, "--data-dir", filepath.Join(t.TempDir(), "dev"), "--controllers-count", "3", "--brokers-count", "3", "--metrics")
	consoles := map[string]string{}
	for _, m := range devConsole.FindAllStringSubmatch(d.stdout.String(), -1) {
		consoles[m[1]] = m[2]
	}
	if len(consoles) != 3 {
		t.Fatalf("keel dev --metrics's banner names %d consoles, want 3:\n%s", len(consoles), d.stdout)
	}
	controllers := d.controllers(t)
	if _, stderr, code := runKeel(t, 30*time.Second, "topic", "create", "browser-orders", "--partitions", "4", "--replication-factor", "3", "--controllers", controllers); code != 0 {
		t.Fatalf("keel topic create: exit %d: %s", code, stderr)
	}
	var o consoleOverview
	if err := consoleJSON(httpClient, consoles["1"]+"api/overview", &o); err != nil {
		t.Fatal(err)
	}
	leader := ""
	for _, v := range o.Voters {
		if v.Leader {
			leader = fmt.Sprint(v.ID)
		}
	}
	follower := map[string]string{"1": "2", "2": "1", "3": "1"}[leader]
	if leader == "" {
		t.Fatalf("controller 1's console names no leader: %+v", o)
	}

	dir := os.Getenv("KEEL_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, id string
		want     []string
	}{
		{name: "active", id: leader, want: []string{
			`data-loaded="1"`, `data-broker="1"`, `data-broker="2"`, `data-broker="3"`, `data-topic="browser-orders"`,
			`id="node-role" class="pill">active controller<`, `data-voter="1"`, `data-voter="2"`, `data-voter="3"`,
			// The topic named in the address opens with its partitions.
			`data-partition="3"`,
		}},
		{name: "follower", id: follower, want: []string{
			`data-loaded="1"`, `data-topic="browser-orders"`, `data-broker="3"`,
			fmt.Sprintf("You are looking at controller %s's own view", follower),
			"The active controller is ",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := consoles[tt.id] + "#topic=browser-orders"
			dom := runChromium(t, chromium, url, "--dump-dom")
			for _, w := range tt.want {
				if !strings.Contains(dom, w) {
					t.Errorf("controller %s's console, as Chromium rendered it, has no %s", tt.id, w)
				}
			}
			if strings.Contains(dom, `data-error=`) {
				t.Errorf("the page reported an error: %s", regexp.MustCompile(`data-error="[^"]*"`).FindString(dom))
			}
			if t.Failed() {
				t.Logf("DOM:\n%s", dom)
			}
			shot := filepath.Join(dir, fmt.Sprintf("console-%s-controller-%s.png", tt.name, tt.id))
			runChromium(t, chromium, url, "--screenshot="+shot, "--window-size=1280,1400", "--hide-scrollbars")
			png, err := os.ReadFile(shot)
			if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
				t.Fatalf("screenshot %s: %v, %d bytes", shot, err, len(png))
			}
			t.Logf("screenshot of controller %s's console (%s): %s", tt.id, tt.name, shot)
		})
	}
}
