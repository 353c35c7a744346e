package portowner

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestOf: a port this process listens on is named with its pid; a port no
// one listens on, and a port only connected from, are not.
func TestOf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux's /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if got, want := Of(port), "(pid "+strconv.Itoa(os.Getpid())+")"; !strings.HasSuffix(got, want) || len(got) == len(want) {
		t.Errorf("Of(%d) = %q, want NAME %s", port, got, want)
	}

	// A connection's own end is no listener.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if own := c.LocalAddr().(*net.TCPAddr).Port; Of(own) != "" {
		t.Errorf("Of(%d), a connection's end, = %q, want \"\"", own, Of(own))
	}

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	if got := Of(freePort); got != "" {
		t.Errorf("Of(%d), closed, = %q, want \"\"", freePort, got)
	}
}
