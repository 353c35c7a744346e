package raftlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
		return meta{}, false, fmt.Errorf("cannot read meta file %s: %v", path, pathCause(err))
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
	if err := writeFileAtomic(path, b); err != nil {
		return fmt.Errorf("write meta file %s: %v", path, pathCause(err))
	}
	return nil
}

// writeFileAtomic writes a temp file in the same directory, fsyncs it,
// renames it over path, then fsyncs the directory so the rename itself
// survives a crash.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// pathCause drops the path an fs.PathError repeats, since our messages name
// the path themselves.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
