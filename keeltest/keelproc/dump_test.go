package keelproc

import (
	"strings"
	"testing"
)

func TestGoroutineDump_KeepsOnlyNonStandardGoroutines(t *testing.T) {
	out := "starting\nSIGQUIT: quit\nPC=0x1 m=0 sigcode=0\n\n" +
		"goroutine 1 [select]:\nruntime.gopark(0x1)\n\t/usr/lib/go/src/runtime/proc.go:1 +0x1\n" +
		"github.com/keel-dev/keel/server.(*Node).run(0xc0)\n\t/src/keel/server/node.go:10 +0x2\n\n" +
		"goroutine 2 [chan receive]:\nruntime.gopark(0x1)\n\t/usr/lib/go/src/runtime/proc.go:1 +0x1\n" +
		"os/signal.loop()\n\t/usr/lib/go/src/os/signal/signal_unix.go:23 +0x1\n\n" +
		"goroutine 3 [IO wait]:\ninternal/poll.(*FD).Read(0xc1)\n\t/usr/lib/go/src/internal/poll/fd_unix.go:1\n" +
		"google.golang.org/grpc.(*Server).Serve(0xc2)\n\t/root/go/pkg/mod/google.golang.org/grpc/server.go:9\n"
	got := goroutineDump(out)
	for _, want := range []string{"goroutine 1 ", "goroutine 3 "} {
		if !strings.Contains(got, want) {
			t.Errorf("dump lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "goroutine 2 ") {
		t.Errorf("dump keeps a standard-library-only goroutine:\n%s", got)
	}
	if goroutineDump("no quit here") != "" {
		t.Error("output without SIGQUIT gave a dump")
	}
}
