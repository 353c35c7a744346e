package keelproc

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrs_OutsideTheEphemeralRangeAndNeverTwice: the ports are distinct across calls, bindable, and below
// the kernel's ephemeral range where Linux says where it starts, so no
// listener on :0 or connection's own end can have taken one meanwhile.
func TestFreeAddrs_OutsideTheEphemeralRangeAndNeverTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 5 {
		addrs, err := FreeAddrs(20)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			_, p, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(p)
			if freeHigh > freeLow && (port < freeLow || port >= freeHigh) {
				t.Errorf("%s is outside [%d,%d)", a, freeLow, freeHigh)
			}
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s is not free: %v", a, err)
			}
			ln.Close()
		}
	}
}
