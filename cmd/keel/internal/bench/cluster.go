package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/metrics"
)

// controllerFlags are the flags every bench controller gets beside its
// identity: a low snapshot threshold checked every second, so the load
// scenario finds a raft snapshot soon after it asks for one; no
// automatic leader rebalance, which would move leaderships in the middle
// of a measurement; and the profiler on the metrics listener (loopback),
// whose heap?gc=1 readMemory asks for.
var controllerFlags = []string{
	"--snapshot-threshold", "1024",
	"--snapshot-interval", "1s",
	"--leader-imbalance-check-interval", "-1s",
	"--pprof",
}

// quorumLogs returns the end of every controller's log, for an error
// report.
func quorumLogs(q *keelproc.Cluster, lines int) string {
	var b strings.Builder
	for _, nd := range q.Controllers() {
		tail, err := nd.LogTail(lines)
		switch {
		case err != nil:
			tail = err.Error() + "\n"
		case tail != "":
			tail += "\n"
		}
		fmt.Fprintf(&b, "--- controller %d (%s), last %d lines of %s\n%s", nd.ID(), nd.Addr(), lines, nd.LogPath(), tail)
	}
	return b.String()
}

// snapshotIndexOnDisk is the highest raft index of a complete raft snapshot
// in a controller's data dir (raft's file snapshot store:
// snapshots/TERM-INDEX-MILLIS/, written as .tmp and renamed when complete).
func snapshotIndexOnDisk(dataDir string) uint64 {
	entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		return 0
	}
	var best uint64
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasSuffix(name, ".tmp") {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) != 3 {
			continue
		}
		if idx, err := strconv.ParseUint(parts[1], 10, 64); err == nil {
			if _, err := os.Stat(filepath.Join(dataDir, "snapshots", name, "state.bin")); err == nil {
				best = max(best, idx)
			}
		}
	}
	return best
}

// memory is what a controller's metrics say of its memory.
type memory struct {
	heapLive uint64 // go_gc_heap_live_bytes, after a collection
	rss      uint64 // process_resident_memory_bytes
}

// readMemory asks a controller's metrics endpoint for its live heap and
// resident set. A heap profile with gc=1 first runs a garbage collection,
// so the go_gc_heap_live_bytes that follows is current, not as of the last
// collection the controller happened to run.
func readMemory(ctx context.Context, metricsAddr string) (memory, error) {
	get := func(path string) (string, error) { return httpGet(ctx, metricsAddr, path) }
	var m memory
	if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		return m, err
	}
	text, err := get("/metrics")
	if err != nil {
		return m, err
	}
	if m.heapLive, err = parseMetric(text, metrics.HeapLiveMetric); err != nil {
		return m, err
	}
	m.rss, err = parseMetric(text, "process_resident_memory_bytes")
	return m, err
}

// httpGet is the body of a GET of path on a node's metrics listener.
func httpGet(ctx context.Context, metricsAddr, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(body), nil
}

// parseMetric finds an unlabelled metric's value in the Prometheus text
// format.
func parseMetric(text, name string) (uint64, error) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", name, err)
		}
		return uint64(v), nil
	}
	return 0, errors.New(name + " not found in the metrics")
}
