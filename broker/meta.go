package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/keel-dev/keel/internal/atomicfile"
)

const (
	metaFileName = "meta.json"
	metaFormat   = 1
)

// ErrClusterMismatch matches (errors.Is) the error an agent reports when its
// data dir belongs to another cluster than its controllers: such a broker
// must not join, or it would serve another cluster's data as this one's.
var ErrClusterMismatch = errors.New("inconsistent cluster id")

// clusterMismatch is an ErrClusterMismatch whose message says it all, in
// one line, without repeating the sentinel's words.
type clusterMismatch struct{ msg string }

func clusterMismatchf(format string, args ...any) error {
	return &clusterMismatch{msg: fmt.Sprintf(format, args...)}
}

func (e *clusterMismatch) Error() string        { return e.msg }
func (e *clusterMismatch) Is(target error) bool { return target == ErrClusterMismatch }

// metaData is DataDir/meta.json. It ties a data dir to one broker id and,
// once the broker first reaches its controllers, one cluster, so that a
// mistyped --broker-id or --data-dir, or a broker pointed at another
// cluster's controllers, fails at once instead of joining.
type metaData struct {
	Format    int    `json:"format"`
	BrokerID  int32  `json:"broker_id"`
	ClusterID string `json:"cluster_id"`
}

// metaFile is the loaded meta file; it remembers the cluster id the agent
// learns and writes it through.
type metaFile struct {
	path string

	mu   sync.Mutex
	data metaData
}

// openMeta reads DataDir/meta.json, creating the dir and the file on a first
// start. It refuses a data dir of another broker.
func openMeta(dir string, brokerID int32) (*metaFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %v", dir, atomicfile.PathCause(err))
	}
	m := &metaFile{path: filepath.Join(dir, metaFileName)}
	b, err := os.ReadFile(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		m.data = metaData{Format: metaFormat, BrokerID: brokerID}
		return m, m.write()
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read meta file %s: %v", m.path, atomicfile.PathCause(err))
	}
	if err := json.Unmarshal(b, &m.data); err != nil {
		return nil, fmt.Errorf("meta file %s is corrupt: %v", m.path, err)
	}
	if m.data.Format != metaFormat {
		return nil, fmt.Errorf("meta file %s has format %d; this keel reads format %d", m.path, m.data.Format, metaFormat)
	}
	if m.data.BrokerID != brokerID {
		return nil, fmt.Errorf("data dir %s belongs to broker %d, not broker %d", dir, m.data.BrokerID, brokerID)
	}
	return m, nil
}

// clusterID is the cluster the data dir belongs to, "" until known.
func (m *metaFile) clusterID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data.ClusterID
}

// learnClusterID records id, which controllers (named for the error) gave,
// on first sight, and refuses any other id after. It returns an error
// wrapping ErrClusterMismatch for another cluster, or the write error if the
// id could not be recorded.
func (m *metaFile) learnClusterID(id, controllers string) (learned bool, err error) {
	if id == "" {
		return false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.data.ClusterID {
	case id:
		return false, nil
	case "":
		m.data.ClusterID = id
		if err := m.write(); err != nil {
			m.data.ClusterID = ""
			return false, err
		}
		return true, nil
	}
	return false, clusterMismatchf("data dir %s belongs to cluster %s, but %s are cluster %s",
		filepath.Dir(m.path), m.data.ClusterID, controllers, id)
}

// write replaces the file atomically; the caller holds mu (or owns m).
func (m *metaFile) write() error {
	b, err := json.Marshal(m.data)
	if err != nil {
		return fmt.Errorf("encode meta file %s: %v", m.path, err)
	}
	if err := atomicfile.Write(m.path, append(b, '\n')); err != nil {
		return fmt.Errorf("write meta file %s: %v", m.path, atomicfile.PathCause(err))
	}
	return nil
}
