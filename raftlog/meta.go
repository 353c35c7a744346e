package raftlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/keel-dev/keel/internal/atomicfile"
)

const (
	metaFileName = "meta.json"
	metaFormat   = 1
)

// meta is DataDir/meta.json. It ties a data dir to one node and, once known,
// one cluster, so that a mistyped --node-id or --data-dir fails at start
// instead of letting a node rejoin with another node's log.
type meta struct {
	Format    int    `json:"format"`
	NodeID    int32  `json:"node_id"`
	ClusterID string `json:"cluster_id"`
}

// readMeta returns the meta file in dir, or ok=false when there is none.
func readMeta(dir string) (m meta, ok bool, err error) {
	path := filepath.Join(dir, metaFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return meta{}, false, nil
	}
	if err != nil {
		return meta{}, false, fmt.Errorf("cannot read meta file %s: %v", path, atomicfile.PathCause(err))
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, false, fmt.Errorf("meta file %s is corrupt: %v", path, err)
	}
	if m.Format != metaFormat {
		return meta{}, false, fmt.Errorf("meta file %s has format %d; this keel reads format %d", path, m.Format, metaFormat)
	}
	if m.NodeID <= 0 {
		return meta{}, false, fmt.Errorf("meta file %s is corrupt: node_id %d is not positive", path, m.NodeID)
	}
	return m, true, nil
}

// writeMeta replaces the meta file atomically: a crash leaves either the old
// file or the new one, never a torn one that would stop the node starting.
func writeMeta(dir string, m meta) error {
	path := filepath.Join(dir, metaFileName)
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode meta file %s: %v", path, err)
	}
	b = append(b, '\n')
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("write meta file %s: %v", path, atomicfile.PathCause(err))
	}
	return nil
}
