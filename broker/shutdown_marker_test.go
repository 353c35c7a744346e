package broker

import (
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
