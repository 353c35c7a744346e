package listenprobe

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
)

// TestDial: a port that holds a new connection open is alive; one that
// nothing listens on, one that accepts and closes at once, and a proxy in
// front of a dead process (up or dropping) are gone; a dial that ran out
// of time says neither.
func TestDial(t *testing.T) {
	listen := func() net.Listener {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holds, closes := listen(), listen()
	gone := listen()
	goneAddr := gone.Addr().String()
	_ = gone.Close()
	var wg sync.WaitGroup
	serve := func(l net.Listener, hold bool) {
		defer wg.Done()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if hold {
				held = append(held, c)
				continue
			}
			_ = c.Close()
		}
	}
	wg.Add(2)
	go serve(holds, true)
	go serve(closes, false)
	t.Cleanup(func() {
		_ = holds.Close()
		_ = closes.Close()
		wg.Wait()
	})
	proxy := func(mode faultproxy.Mode, target string) string {
		p, err := faultproxy.New("probe", target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		p.Set(mode)
		return p.Addr()
	}
	for _, tt := range []struct {
		name        string
		addr        string
		timeout     time.Duration
		wantAlive   bool
		wantRefused bool
	}{
		{name: "a listener that holds the connection", addr: holds.Addr().String(), wantAlive: true},
		{name: "a proxy in front of a live listener", addr: proxy(faultproxy.Up, holds.Addr().String()), wantAlive: true},
		{name: "a listener that closes it at once", addr: closes.Addr().String(), wantRefused: true},
		{name: "nothing listening", addr: goneAddr, wantRefused: true},
		{name: "a proxy in front of nothing", addr: proxy(faultproxy.Up, goneAddr), wantRefused: true},
		{name: "a proxy that drops its link", addr: proxy(faultproxy.Drop, holds.Addr().String()), wantRefused: true},
		{name: "out of time before the dial", addr: holds.Addr().String(), timeout: -time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := Dial(ctx, tt.addr)
			if alive, refused := err == nil, Refused(err); alive != tt.wantAlive || refused != tt.wantRefused {
				t.Errorf("Dial = %v (alive %v, refused %v), want alive %v, refused %v", err, alive, refused, tt.wantAlive, tt.wantRefused)
			}
		})
	}
}
