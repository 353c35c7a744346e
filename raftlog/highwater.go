package raftlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// A data dir rolled back: how far its log went, kept outside the log.
//
// The raft store says how far the log goes, not how far it went: a raft.db
// replaced by an older copy, or a whole data dir put back from a backup,
// opens as a consistent, shorter log. Raft then counts this node's vote and
// log as though it still held every entry it acknowledged, and a quorum that
// needed those acknowledgements to commit may elect a leader without them,
// which truncates them everywhere (seen: 10 of 10 acknowledged writes gone
// on every node). Two records tell:
//
//   - DataDir/highwater.json, beside the store and written apart from it
//     (every highWaterEvery when it changed, and at a clean stop, fsynced
//     and replaced atomically): the highest index this node's state machine
//     applied. A log that ends below it was rolled back on its own (Open
//     refuses it). Applied entries are committed, and a node stores an
//     entry before it counts towards a commit, so a log never legitimately
//     ends below them; it may end below an uncommitted entry it once held,
//     which a new leader truncates, so the last index is not what is kept.
//   - the same file's peers: the highest committed index this node has seen
//     each peer hold. A leader knows each follower's match index
//     (peerProgress), of which the committed part is kept; a follower knows
//     that its leader holds everything it has applied (a leader holds every
//     committed entry). A whole data dir rolled back consistently, its own
//     highwater.json with it, cannot see itself; its peers can: a node with
//     raft state asks them before raft starts (Config.BeforeRaft, served
//     by server) and refuses to start when an answer is above its log.
//
// Neither can catch a rollback within the last highWaterEvery before a
// crash, a peer's record that was itself rolled back, or every data dir
// rolled back together.

const (
	highWaterFileName = "highwater.json"
	highWaterFormat   = 1
	// highWaterEvery is how often a running node records its marks when they
	// changed: three small fsyncs a second at most, off raft's path.
	highWaterEvery = time.Second
)

// highWater is DataDir/highwater.json.
type highWater struct {
	Format int   `json:"format"`
	NodeID int32 `json:"node_id"`
	// Applied is the highest index this node's state machine applied.
	Applied uint64 `json:"applied"`
	// Peers is, by node id, the highest committed index this node has seen
	// that node hold.
	Peers map[int32]uint64 `json:"peers,omitempty"`
}

// readHighWater reads dir's high-water file; a data dir without one (new,
// or from a keel before it) has marks at 0.
func readHighWater(dir string, nodeID int32) (highWater, error) {
	path := filepath.Join(dir, highWaterFileName)
	hw := highWater{Format: highWaterFormat, NodeID: nodeID}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return hw, nil
	}
	if err != nil {
		return highWater{}, fmt.Errorf("cannot read %s: %v", path, atomicfile.PathCause(err))
	}
	if err := json.Unmarshal(b, &hw); err != nil {
		return highWater{}, fmt.Errorf("%s is corrupt: %v", path, err)
	}
	switch {
	case hw.Format != highWaterFormat:
		return highWater{}, fmt.Errorf("%s has format %d; this keel reads format %d", path, hw.Format, highWaterFormat)
	case hw.NodeID != nodeID:
		return highWater{}, fmt.Errorf("%s belongs to node %d, not node %d", path, hw.NodeID, nodeID)
	}
	return hw, nil
}

func writeHighWater(dir string, hw highWater) error {
	path := filepath.Join(dir, highWaterFileName)
	b, err := json.Marshal(hw)
	if err != nil {
		return fmt.Errorf("encode %s: %v", path, err)
	}
	if err := atomicfile.Write(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %v", path, atomicfile.PathCause(err))
	}
	return nil
}

// checkHighWater refuses a store whose log (with its newest snapshot) ends
// below the index the node recorded it had applied.
func checkHighWater(dataDir string, nodeID int32, hw highWater, logPath string, last uint64) error {
	if last >= hw.Applied {
		return nil
	}
	return fmt.Errorf("data dir %s was rolled back: its raft log %s ends at index %d, but %s records that this node applied index %d; "+
		"it must not start from it, or it could lose acknowledged writes; if you have the newer log, put it back; otherwise %s",
		dataDir, logPath, last, filepath.Join(dataDir, highWaterFileName), hw.Applied, rejoinHint(nodeID))
}

// RolledBackError is the refusal of a start whose log ends below what a
// peer saw this node hold.
func RolledBackError(dataDir string, nodeID, peer int32, seen, last uint64) error {
	return fmt.Errorf("data dir %s was rolled back: voter %d saw this node hold index %d, but its log ends at index %d; "+
		"it must not start from it, or the writes it acknowledged may be lost; if you have the newer data dir, put it back; otherwise %s",
		dataDir, peer, seen, last, rejoinHint(nodeID))
}

// HighWater is a node's marks (highwater.json), read at start and kept up to
// date by the running node.
type HighWater struct {
	dir string

	mu      sync.Mutex
	hw      highWater
	written highWater // as last written
	lastErr string    // the last write error logged
}

// Acknowledged returns the highest committed index this node has seen node
// id hold, 0 when it has recorded none. It answers a peer that asks about
// itself as it starts.
func (h *HighWater) Acknowledged(id int32) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hw.Peers[id]
}

// observe raises the marks to applied and peers; it never lowers them.
// With voters (the latest configuration's), it forgets the peers outside
// it: a node removed and added back later starts on an empty data dir, and
// what its earlier incarnation held says nothing of the new one's log.
func (h *HighWater) observe(applied uint64, peers map[int32]uint64, voters map[int32]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hw.Applied = max(h.hw.Applied, applied)
	if voters != nil {
		for id := range h.hw.Peers {
			if !voters[id] {
				delete(h.hw.Peers, id)
			}
		}
	}
	for id, idx := range peers {
		if idx > h.hw.Peers[id] {
			if h.hw.Peers == nil {
				h.hw.Peers = map[int32]uint64{}
			}
			h.hw.Peers[id] = idx
		}
	}
}

// flush writes the marks if they changed since the last write.
func (h *HighWater) flush() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hw.Applied == h.written.Applied && maps.Equal(h.hw.Peers, h.written.Peers) {
		return nil
	}
	hw := h.hw
	hw.Peers = maps.Clone(h.hw.Peers)
	if err := writeHighWater(h.dir, hw); err != nil {
		return err
	}
	h.written = hw
	return nil
}

// recordHighWater raises the marks to what this node knows now and writes
// them if they changed. A leader records, for each voter, the committed
// part of what it acknowledged; a follower, that its leader holds
// everything it has applied. Applied is read before the leader, so that
// the leader named is one elected at or after the term those entries were
// committed in, which holds them.
func (n *Node) recordHighWater() {
	applied := max(n.Raft.AppliedIndex(), n.fsm.done.Load())
	state := n.Raft.State()
	_, leader := n.Raft.LeaderWithID()
	var conf []raft.Server
	var voters map[int32]bool
	if f := n.Raft.GetConfiguration(); f.Error() == nil && len(f.Configuration().Servers) > 0 {
		conf, voters = f.Configuration().Servers, map[int32]bool{}
		for _, s := range conf {
			if id, err := ParseServerID(s.ID); err == nil && s.Suffrage == raft.Voter {
				voters[id] = true
			}
		}
	}
	peers := map[int32]uint64{}
	switch state {
	case raft.Leader:
		term, commit := n.Raft.CurrentTerm(), n.Raft.CommitIndex()
		for _, s := range conf {
			id, err := ParseServerID(s.ID)
			if err != nil || id == n.id {
				continue
			}
			if p := n.watched.progress.of(s.ID, term); p.Match > 0 {
				peers[id] = min(p.Match, commit)
			}
		}
	case raft.Follower:
		if id, err := ParseServerID(leader); leader != "" && err == nil && id != n.id {
			peers[id] = applied
		}
	}
	n.highWater.observe(applied, peers, voters)
	err := n.highWater.flush()
	n.highWater.mu.Lock()
	defer n.highWater.mu.Unlock()
	switch {
	case err == nil:
		n.highWater.lastErr = ""
	case err.Error() != n.highWater.lastErr:
		n.highWater.lastErr = err.Error()
		n.logger.Warn("cannot record how far the log went; a rollback of the data dir since the last record would not be seen", "err", err)
	}
}

// runHighWater records the marks every highWaterEvery until done closes.
func (n *Node) runHighWater(done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	tick := time.NewTicker(highWaterEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			n.recordHighWater()
		}
	}
}

// HighWater returns the node's marks.
func (n *Node) HighWater() *HighWater { return n.highWater }

// StartState is what a node's data dir holds as it starts, handed to
// Config.BeforeRaft before raft starts.
type StartState struct {
	// HeldState: the store holds raft state (a term or a log entry).
	HeldState bool
	// LastIndex is the last index the log and the newest snapshot hold.
	LastIndex uint64
	// Peers are the other voters of the latest raft configuration the data
	// dir holds (none for a new one).
	Peers []Voter
	// HighWater are the node's marks, to answer peers that ask about
	// themselves while this node starts.
	HighWater *HighWater
}
