package raftlog

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestSnapshotLoad_CountsAndPaces: a restore's reads are counted while it
// runs and the load is gone after; a pace spreads them over its duration.
func TestSnapshotLoad_CountsAndPaces(t *testing.T) {
	var l SnapshotLoad
	if _, _, ok := l.Progress(); ok {
		t.Fatal("a zero SnapshotLoad reports a restore")
	}
	if _, _, ok := (*SnapshotLoad)(nil).Progress(); ok {
		t.Fatal("a nil SnapshotLoad reports a restore")
	}
	data := bytes.Repeat([]byte("k"), 1000)
	const pace = 200 * time.Millisecond
	start := time.Now()
	r := l.begin(bytes.NewReader(data), int64(len(data)), pace)
	buf := make([]byte, 300)
	n, err := r.Read(buf)
	if err != nil || n != 11 { // a hundredth of 1000, rounded up
		t.Fatalf("first paced read = %d, %v; want 11 bytes", n, err)
	}
	if read, size, ok := l.Progress(); !ok || read != 11 || size != 1000 {
		t.Fatalf("Progress() = %d, %d, %v; want 11 of 1000", read, size, ok)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	// The last read is due at pace*989/1000: a floor, never a ceiling.
	if took := time.Since(start); took < pace*9/10 {
		t.Errorf("a restore paced at %v took %v", pace, took)
	}
	if read, _, _ := l.Progress(); read != 1000 {
		t.Errorf("read %d of 1000", read)
	}
	l.end()
	if _, _, ok := l.Progress(); ok {
		t.Error("a restore still reported after end")
	}
}
