package broker

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestCleanShutdownMarker: the marker a clean shutdown leaves is read and
// removed once at the next start (KIP-966's previous broker epoch); with
// none, or one that cannot be read, the broker reports -1.
func TestCleanShutdownMarker(t *testing.T) {
	dir := t.TempDir()
	if got, err := takeCleanShutdown(dir); err != nil || got != -1 {
		t.Fatalf("no marker: %d, %v; want -1", got, err)
	}
	if err := markCleanShutdown(dir, 42); err != nil {
		t.Fatal(err)
	}
	if got, err := takeCleanShutdown(dir); err != nil || got != 42 {
		t.Fatalf("marker of epoch 42: %d, %v", got, err)
	}
	if got, err := takeCleanShutdown(dir); err != nil || got != -1 {
		t.Fatalf("the marker was not removed: %d, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, cleanShutdownFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := takeCleanShutdown(dir); err != nil || got != -1 {
		t.Fatalf("a damaged marker: %d, %v; want -1", got, err)
	}
}

// TestStart_FailedStartKeepsTheCleanShutdown: a start that fails before it
// could write anything (its port is taken) leaves the last shutdown clean,
// so that the next start still reports it, and the replica stays eligible
// to lead from the ELR. (A restart on a port another process had taken
// once cost a partition its only eligible leader.)
func TestStart_FailedStartKeepsTheCleanShutdown(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := openMeta(dir, 1); err != nil {
		t.Fatal(err)
	}
	if err := markCleanShutdown(dir, 42); err != nil {
		t.Fatal(err)
	}
	a, err := Start(Config{BrokerID: 1, DataDir: dir, Listen: taken.Addr().String(), Controllers: []string{"127.0.0.1:1"}})
	if err == nil {
		a.Close()
		t.Fatal("Start on a port in use succeeded")
	}
	if got, err := takeCleanShutdown(dir); err != nil || got != 42 {
		t.Fatalf("after the failed start the marker holds %d (%v); want 42", got, err)
	}
}
