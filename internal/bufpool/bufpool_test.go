package bufpool

import "testing"

func TestGetPut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		wantCap int
	}{
		{"zero takes the smallest class", 0, 4096},
		{"one byte", 1, 4096},
		{"exactly a class", 4096, 4096},
		{"one past a class", 4097, 8192},
		{"largest class", 16 << 20, 16 << 20},
		{"past the largest is not pooled", 16<<20 + 1, 16<<20 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Get(tc.n)
			if len(*b) != tc.n || cap(*b) != tc.wantCap {
				t.Fatalf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.wantCap)
			}
			Put(b)
		})
	}
}

func TestPutDropsForeignBuffers(t *testing.T) {
	foreign := make([]byte, 10, 5000)
	Put(&foreign) // not a class: dropped, no panic
	Put(nil)
	if b := Get(100); cap(*b) != 4096 {
		t.Fatalf("cap %d after foreign puts, want 4096", cap(*b))
	}
}

func TestGetReusesPutBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	allocs := testing.AllocsPerRun(100, func() {
		Put(Get(64 << 10))
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per Get/Put, want 0", allocs)
	}
}
