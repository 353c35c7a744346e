package keelproc

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeBlock_BindableAndNeverTwice: every port of a block is free, and
// no port is handed out again, by FreeBlock or FreeAddrs.
func TestFreeBlock_BindableAndNeverTwice(t *testing.T) {
	offsets := []int{0, 1, 100, 200, 300, 400}
	seen := map[int]bool{}
	for range 3 {
		base, err := FreeBlock(offsets...)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offsets {
			p := base + o
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d is not free: %v", p, err)
			}
			ln.Close()
		}
	}
	addrs, err := FreeAddrs(50)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		if port, _ := strconv.Atoi(p); seen[port] {
			t.Errorf("FreeAddrs handed out %s, in a block", a)
		}
	}
}
