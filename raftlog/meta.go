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
	// metaFormat is a boltdb data dir's meta file, as every keel has written
	// it since the first: it has no log_store field.
	metaFormat = 1
	// metaFormatLogStore is the meta file of a data dir with another store,
	// named in log_store. A keel from before --log-store refuses it ("has
	// format 2") instead of starting an empty boltdb log beside the node's
	// real one, which would make it forget its log and its vote.
	metaFormatLogStore = 2
)

// meta is DataDir/meta.json. It ties a data dir to one node and, once known,
// one cluster, so that a mistyped --node-id or --data-dir fails at start
// instead of letting a node rejoin with another node's log. It also records
// the log store, so that the data dir is never opened with the other one.
type meta struct {
	Format    int    `json:"format"`
	NodeID    int32  `json:"node_id"`
	ClusterID string `json:"cluster_id"`
	// LogStore is LogStoreWAL in a format 2 file; in memory, "" is read as
	// LogStoreBoltDB (format 1 has no such field).
	LogStore string `json:"log_store,omitempty"`
	// RaftState is set once the log store has held raft state (a term, a
	// log entry): from then on the data dir must never start without it
	// (checkHeldState). The meta file is written before the store exists,
	// so its presence alone does not say that. Keels before this field
	// ignore it; a data dir they wrote gets it on its next start.
	RaftState bool `json:"raft_state,omitempty"`
}

// newMeta is the meta file of a new data dir for node id with store.
func newMeta(id int32, store string) meta {
	m := meta{Format: metaFormat, NodeID: id}
	if store = logStoreOrDefault(store); store != LogStoreBoltDB {
		m.Format, m.LogStore = metaFormatLogStore, store
	}
	return m
}

// logStore is the store the data dir holds.
func (m meta) logStore() string { return logStoreOrDefault(m.LogStore) }

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
	// A broker's data dir has a meta.json too, naming a broker_id: the
	// wrong --data-dir, not a damaged one.
	var b2 struct {
		BrokerID *int32 `json:"broker_id"`
	}
	if json.Unmarshal(b, &b2) == nil && b2.BrokerID != nil && m.NodeID == 0 {
		return meta{}, false, fmt.Errorf("data dir %s is broker %d's (its %s names a broker_id), not a controller's: give a controller's data dir", dir, *b2.BrokerID, metaFileName)
	}
	switch {
	case m.Format == metaFormat && m.LogStore == "":
	case m.Format == metaFormatLogStore && m.LogStore == LogStoreWAL:
	case m.Format == metaFormat || m.Format == metaFormatLogStore:
		return meta{}, false, fmt.Errorf("meta file %s is corrupt: format %d with log_store %q", path, m.Format, m.LogStore)
	default:
		return meta{}, false, fmt.Errorf("meta file %s has format %d; this keel reads formats %d and %d",
			path, m.Format, metaFormat, metaFormatLogStore)
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
