package keelproc

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/broker/partlog"
)

// TestPowerLoss: a broker's power loss kills it and cuts every replica log
// of its data dir (partlog.DropUnsynced, tested there batch by batch),
// reporting each; a controller, or a broker not running, is refused by
// name.
func TestPowerLoss(t *testing.T) {
	exe := fakeKeel(t, `case "$1" in
controller) echo 'level=INFO msg="controller started"'; exec sleep 60 ;;
broker) echo 'level=INFO msg="broker started"'; exec sleep 60 ;;
esac
exit 3
`)
	c := mustNew(t, Config{Keel: exe, Controllers: 1})
	defer closeCluster(t, c)
	defer func() { _ = c.Kill(c.Nodes()...) }() // sleep exits on SIGTERM with no status 0
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBrokers(ctx, BrokerSpec{ID: 4}); err != nil {
		t.Fatal(err)
	}
	b := c.Broker(4)
	// Two replica logs, as the broker lays them out; left open, as a
	// process that dies leaves them.
	var dirs []string
	for _, name := range []string{"t1-0", "t1-1"} {
		dir := filepath.Join(b.DataDir(), "logs", name)
		if _, err := partlog.Open(dir, partlog.Config{}); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}

	if _, err := c.PowerLoss(c.Controller(1)); err == nil || !strings.Contains(err.Error(), "power loss of controller 1: only a broker's logs can be cut") {
		t.Fatalf("PowerLoss of a controller = %v", err)
	}
	cuts, err := c.PowerLoss(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []LogCut{{Broker: 4, Dir: dirs[0]}, {Broker: 4, Dir: dirs[1]}}
	if !slices.Equal(cuts, want) || b.Running() {
		t.Fatalf("PowerLoss = %+v, running %v; want %+v, not running", cuts, b.Running(), want)
	}
	if _, err := c.PowerLoss(b); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("PowerLoss of a dead broker = %v, want ErrNotRunning", err)
	}
}
