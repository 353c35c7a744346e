package keelproc

import (
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
)

// FreeBlock returns a base port such that base+offset is free on loopback
// for every offset, for a process that lays its ports out from one base
// (keel dev --base-port, the README's cluster). The ports come from the
// range FreeAddrs picks from and are handed out once per process, so no
// FreeAddrs of another test in this process takes one; another process
// still may, as with FreeAddrs.
func FreeBlock(offsets ...int) (int, error) {
	if len(offsets) == 0 {
		return 0, errors.New("FreeBlock: no offsets")
	}
	span := slices.Max(offsets) + 1
	freeMu.Lock()
	defer freeMu.Unlock()
	if freeHigh-freeLow <= span {
		return 0, errors.New("FreeBlock: no range below the ephemeral ports to pick from")
	}
	for range 200 {
		base := freeLow + rand.IntN(freeHigh-freeLow-span)
		if blockFree(base, offsets) {
			for _, o := range offsets {
				freeUsed[base+o] = true
			}
			return base, nil
		}
	}
	return 0, errors.New("FreeBlock: no free block in 200 tries")
}

// blockFree says whether every base+offset is unused by this process and
// bindable on 127.0.0.1.
func blockFree(base int, offsets []int) bool {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, o := range offsets {
		if freeUsed[base+o] {
			return false
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+o)))
		if err != nil {
			return false
		}
		lns = append(lns, ln)
	}
	return true
}
