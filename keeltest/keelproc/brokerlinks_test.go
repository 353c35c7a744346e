package keelproc

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/internal/faultproxy"
)

// TestStartBrokers_ProxyBrokers: with Config.ProxyBrokers each broker
// dials each controller's voter address through a proxy of its own
// (--test-dial-via), kept across a restart; SetBrokerLinks cuts one
// broker's links and no other's; Close closes them.
func TestStartBrokers_ProxyBrokers(t *testing.T) {
	exe := fakeKeel(t, `case "$1" in
controller) echo 'level=INFO msg="controller started"'; exec sleep 60 ;;
broker) echo 'level=INFO msg="broker started"'; exec sleep 60 ;;
esac
exit 3
`)
	c := mustNew(t, Config{Keel: exe, Controllers: 2, ProxyBrokers: true})
	closed := false
	defer func() {
		if !closed {
			_ = c.Kill(c.Nodes()...)
			_ = c.Close()
		}
	}()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBrokers(context.Background(), BrokerSpec{ID: 1}, BrokerSpec{ID: 2, Flags: []string{"--rack", "r2"}}); err != nil {
		t.Fatal(err)
	}
	voters := c.VoterAddrs()
	for _, b := range []int32{1, 2} {
		var via []string
		for i, v := range voters {
			p := c.BrokerLink(b, int32(i+1))
			if p == nil || p.Target() != v {
				t.Fatalf("broker %d's link to controller %d: %v, want a proxy to %s", b, i+1, p, v)
			}
			via = append(via, v+"="+p.Addr())
		}
		args := c.Broker(b).Args()
		if i := slices.Index(args, "--test-dial-via"); i < 0 || i+1 == len(args) || args[i+1] != strings.Join(via, ",") {
			t.Fatalf("broker %d's args %q: want --test-dial-via %s", b, args, strings.Join(via, ","))
		}
	}
	if c.BrokerLink(1, 1) == c.BrokerLink(2, 1) {
		t.Fatal("brokers 1 and 2 share a link")
	}
	if c.BrokerLink(3, 1) != nil || c.BrokerLink(1, 3) != nil {
		t.Fatal("a link for a broker or a controller that does not exist")
	}
	if err := c.SetBrokerLinks(3, faultproxy.Drop); err == nil {
		t.Fatal("SetBrokerLinks of a broker without links succeeded")
	}
	if err := c.SetBrokerLinks(1, faultproxy.Drop); err != nil {
		t.Fatal(err)
	}
	for ctrl := int32(1); ctrl <= 2; ctrl++ {
		if m1, m2 := c.BrokerLink(1, ctrl).Mode(), c.BrokerLink(2, ctrl).Mode(); m1 != faultproxy.Drop || m2 != faultproxy.Up {
			t.Fatalf("links to controller %d after cutting broker 1's: broker 1 %v, broker 2 %v", ctrl, m1, m2)
		}
	}
	link := c.BrokerLink(1, 1)
	before := c.Broker(1).Args()
	if err := c.Kill(c.Broker(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNodes(context.Background(), c.Broker(1)); err != nil {
		t.Fatal(err)
	}
	if c.BrokerLink(1, 1) != link || !slices.Equal(c.Broker(1).Args(), before) {
		t.Fatal("a restarted broker's links or flags changed")
	}
	_ = c.Kill(c.Nodes()...) // sleep exits on SIGTERM with no status 0
	closed = true
	_ = c.Close()
	if c.BrokerLink(1, 1) != nil {
		t.Fatal("the links outlived Close")
	}
}
