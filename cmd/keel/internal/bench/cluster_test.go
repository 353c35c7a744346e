package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMetric(t *testing.T) {
	text := `# HELP go_gc_heap_live_bytes Heap memory occupied by live objects.
# TYPE go_gc_heap_live_bytes gauge
go_gc_heap_live_bytes 1.2345678e+07
go_gc_heap_live_bytes_total 5
process_resident_memory_bytes 4.2e+07
weird_metric abc
`
	for _, tc := range []struct {
		name    string
		want    uint64
		wantErr string
	}{
		{"go_gc_heap_live_bytes", 12345678, ""},
		{"process_resident_memory_bytes", 42000000, ""},
		{"go_gc_heap_live", 0, "not found"},
		{"weird_metric", 0, "weird_metric"},
		{"absent", 0, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMetric(text, tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMetric(%s) = %d, %v; want an error with %q", tc.name, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseMetric(%s) = %d, %v; want %d", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestSnapshotIndexOnDisk(t *testing.T) {
	dir := t.TempDir()
	if got := snapshotIndexOnDisk(dir); got != 0 {
		t.Fatalf("no snapshots: %d", got)
	}
	for name, complete := range map[string]bool{
		"2-100-1700000000000":     true,
		"3-250-1700000000001":     true,
		"3-900-1700000000002.tmp": true,  // being written
		"4-800-1700000000003":     false, // no state.bin yet
		"garbage":                 true,
	} {
		d := filepath.Join(dir, "snapshots", name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if complete {
			if err := os.WriteFile(filepath.Join(d, "state.bin"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := snapshotIndexOnDisk(dir); got != 250 {
		t.Fatalf("snapshotIndexOnDisk = %d, want 250", got)
	}
}

// TestStartQuorumGivesUpOnTakenPorts: controllers that keep failing to bind
// (a fake keel that says so and exits) are started again on other ports, a
// few times, and then the error is returned with their logs.
func TestStartQuorumGivesUpOnTakenPorts(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "keel")
	script := "#!/bin/sh\necho 'keel: listen tcp 127.0.0.1:1: bind: address already in use' >&2\nexit 1\n"
	if err := os.WriteFile(exe, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	var status strings.Builder
	r := &runner{cfg: Config{Executable: exe, Status: &status}, dir: t.TempDir()}
	t.Cleanup(r.close)
	err := r.startQuorum(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("startQuorum = %v, want an error naming the exited controller", err)
	}
	if n := strings.Count(status.String(), "starting the quorum again"); n != 2 {
		t.Fatalf("%d restarts, want 2:\n%s", n, status.String())
	}
	if logs := quorumLogs(r.quorum, 5); !strings.Contains(logs, "address already in use") {
		t.Fatalf("logs: %s", logs)
	}
}
