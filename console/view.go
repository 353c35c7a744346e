package console

import (
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The JSON the page reads: built from one image per answer, so that every
// table of an answer is as of one applied index, which the answer names
// with whose view it is (source).

// source is whose view an answer is: keelpb.ReadSource, as the admin API's
// stale reads report it.
type source struct {
	NodeID        int32  `json:"node_id"`
	Active        bool   `json:"active"`
	AppliedIndex  uint64 `json:"applied_index"`
	LeaderID      int32  `json:"leader_id"`
	LastContactMs int64  `json:"last_contact_ms"`
	BehindIndex   uint64 `json:"behind_index"`
	BehindMs      int64  `json:"behind_ms"`
}

func sourceOf(s *keelpb.ReadSource) source {
	return source{
		NodeID: s.GetNodeId(), Active: s.GetActive(), AppliedIndex: s.GetAppliedIndex(), LeaderID: s.GetLeaderId(),
		LastContactMs: s.GetLastContactMs(), BehindIndex: s.GetBehindIndex(), BehindMs: s.GetBehindMs(),
	}
}

// overview is /console/api/overview: the quorum, the brokers, counts, the
// reassignments in progress and the finalized feature level.
type overview struct {
	AsOf            time.Time      `json:"as_of"`
	Source          source         `json:"source"`
	ClusterID       string         `json:"cluster_id"`
	ControllerEpoch int64          `json:"controller_epoch"`
	Node            nodeView       `json:"node"`
	Voters          []voterView    `json:"voters"`
	Brokers         []brokerView   `json:"brokers"`
	Counts          counts         `json:"counts"`
	Reassignments   []partitionRow `json:"reassignments"`
	// ReassignmentsOmitted counts those beyond maxReassignments.
	ReassignmentsOmitted int `json:"reassignments_omitted"`
	// MetadataVersion is the finalized metadata.version in the image.
	MetadataVersion uint32 `json:"metadata_version"`
}

// nodeView is the controller serving the page, as DescribeQuorum tells it.
type nodeView struct {
	ID                 int32  `json:"id"`
	State              string `json:"state"` // raft's: leader, follower, candidate
	Active             bool   `json:"active"`
	LeaderID           int32  `json:"leader_id"`
	RaftTerm           uint64 `json:"raft_term"`
	CommitIndex        uint64 `json:"commit_index"`
	LastIndex          uint64 `json:"last_index"`
	AppliedIndex       uint64 `json:"applied_index"`
	Ready              bool   `json:"ready"`
	NotReadyReason     string `json:"not_ready_reason,omitempty"`
	Version            string `json:"version"`
	MinMetadataVersion uint32 `json:"min_metadata_version"`
	MaxMetadataVersion uint32 `json:"max_metadata_version"`
	DivergedIndex      uint64 `json:"diverged_index,omitempty"`
	DivergedReason     string `json:"diverged_reason,omitempty"`
}

// voterView is one member of the raft configuration; its replication
// only on the active controller's page (known is false elsewhere).
type voterView struct {
	ID       int32  `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	Known    bool   `json:"replication_known"`
	Match    uint64 `json:"match_index"`
	// Lag is the leader's last index less the voter's.
	Lag           uint64 `json:"lag"`
	LastContactMs int64  `json:"last_contact_ms"`
}

// brokerView is a registered broker and what it holds.
type brokerView struct {
	ID           int32  `json:"id"`
	Address      string `json:"address"`
	KafkaAddress string `json:"kafka_address"`
	State        string `json:"state"` // fsm.BrokerActive, BrokerFenced, BrokerShuttingDown
	Epoch        int64  `json:"epoch"`
	Rack         string `json:"rack"`
	Leaders      int    `json:"leaders"`
	Replicas     int    `json:"replicas"`
	// MovingOff counts partitions a reassignment (a drain) is moving off it.
	MovingOff int `json:"moving_off"`
}

// counts are the cluster's totals.
type counts struct {
	Topics          int `json:"topics"`
	Partitions      int `json:"partitions"`
	UnderReplicated int `json:"under_replicated"`
	Offline         int `json:"offline"`
	Reassigning     int `json:"reassigning"`
	Brokers         int `json:"brokers"`
	FencedBrokers   int `json:"fenced_brokers"`
}

// partitionRow is one partition, as `keel topic describe` shows it.
type partitionRow struct {
	Topic           string  `json:"topic"`
	Partition       int32   `json:"partition"`
	Leader          int32   `json:"leader"`
	LeaderEpoch     int32   `json:"leader_epoch"`
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	ELR             []int32 `json:"elr"`
	Adding          []int32 `json:"adding"`
	Removing        []int32 `json:"removing"`
	UnderReplicated bool    `json:"under_replicated"`
	Offline         bool    `json:"offline"`
	NoLeaderReason  string  `json:"no_leader_reason,omitempty"`
}

// underReplicated: fewer replicas in the ISR than assigned, as `keel
// topic describe --under-replicated-partitions` and Kafka's
// UnderReplicatedPartitions count them (the replicas being added
// included).
func underReplicated(p *fsm.Partition) bool { return len(p.ISR) < len(p.Replicas) }

// offline: no leader, as keel_controller_offline_partitions_count counts.
func offline(p *fsm.Partition) bool { return p.Leader == fsm.NoLeader }

func unhealthy(p *fsm.Partition) bool { return underReplicated(p) || offline(p) }

func rowOf(img *fsm.Image, topic string, p *fsm.Partition) partitionRow {
	return partitionRow{
		Topic: topic, Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
		Replicas: ints(p.Replicas), ISR: ints(p.ISR), ELR: ints(p.ELR()),
		Adding: ints(p.AddingReplicas), Removing: ints(p.RemovingReplicas),
		UnderReplicated: underReplicated(p), Offline: offline(p),
		NoLeaderReason: controller.NoLeaderReason(img, p),
	}
}

// ints keeps an empty list [] in JSON rather than null.
func ints(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// topicHealth is one topic's partitions that are not well.
type topicHealth struct {
	underReplicated, offline, reassigning int
}

// scan is what one pass over every partition of an image finds: the
// totals, each broker's share, the unhealthy topics and the
// reassignments. A million partitions take a moment to walk, so a scan is
// kept for as long as the node's image is the same (an idle cluster's
// does not change), as the controller's metrics collector keeps its own.
type scan struct {
	counts        counts
	leaders       map[int32]int
	replicas      map[int32]int
	movingOff     map[int32]int
	topics        map[fsm.TopicID]topicHealth
	reassignments []*fsm.Partition // the first maxReassignments
}

// maxReassignments bounds the reassignments an overview lists.
const maxReassignments = 100

func scanImage(img *fsm.Image) *scan {
	s := &scan{
		counts:    counts{Topics: img.TopicCount(), Partitions: img.PartitionCount(), Reassigning: img.Reassignments()},
		leaders:   map[int32]int{},
		replicas:  map[int32]int{},
		movingOff: map[int32]int{},
		topics:    map[fsm.TopicID]topicHealth{},
	}
	img.EachPartition(func(p *fsm.Partition) bool {
		if p.Leader != fsm.NoLeader {
			s.leaders[p.Leader]++
		}
		for _, r := range p.Replicas {
			s.replicas[r]++
		}
		for _, r := range p.RemovingReplicas {
			s.movingOff[r]++
		}
		ur, off, moving := underReplicated(p), offline(p), p.Reassigning()
		if !ur && !off && !moving {
			return true
		}
		h := s.topics[p.TopicID]
		if ur {
			h.underReplicated++
			s.counts.UnderReplicated++
		}
		if off {
			h.offline++
			s.counts.Offline++
		}
		if moving {
			h.reassigning++
			if len(s.reassignments) < maxReassignments {
				s.reassignments = append(s.reassignments, p)
			}
		}
		s.topics[p.TopicID] = h
		return true
	})
	for _, b := range img.Brokers() {
		s.counts.Brokers++
		if b.Fenced {
			s.counts.FencedBrokers++
		}
	}
	return s
}

// scanCache keeps the scan of the latest image asked about. The pointer
// is weak so that an image the FSM has replaced is not kept alive for the
// sake of a comparison.
type scanCache struct {
	mu   sync.Mutex
	img  weak.Pointer[fsm.Image]
	last *scan
}

func (c *scanCache) of(img *fsm.Image) *scan {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.img.Value() == img {
		return c.last
	}
	c.img, c.last = weak.Make(img), scanImage(img)
	return c.last
}

// buildOverview is the overview of img, as the node that holds it
// (q, its DescribeQuorum) sees the quorum.
func buildOverview(img *fsm.Image, src *keelpb.ReadSource, q *keelpb.DescribeQuorumResponse, s *scan, now time.Time) *overview {
	o := &overview{
		AsOf: now, Source: sourceOf(src), ClusterID: img.ClusterID, ControllerEpoch: img.ControllerEpoch,
		Counts: s.counts, MetadataVersion: img.FinalizedMetadataVersion(),
		Node: nodeView{
			ID: q.GetNodeId(), State: q.GetState(), Active: q.GetActive(), LeaderID: q.GetLeaderId(), RaftTerm: q.GetRaftTerm(),
			CommitIndex: q.GetCommitIndex(), LastIndex: q.GetLastIndex(), AppliedIndex: q.GetAppliedIndex(),
			Ready: q.GetReady(), NotReadyReason: q.GetNotReadyReason(), Version: q.GetVersion(),
			MinMetadataVersion: q.GetMinMetadataVersion(), MaxMetadataVersion: q.GetMaxMetadataVersion(),
			DivergedIndex: q.GetDivergedIndex(), DivergedReason: q.GetDivergedReason(),
		},
		Voters:        []voterView{},
		Brokers:       []brokerView{},
		Reassignments: []partitionRow{},
	}
	if o.ClusterID == "" {
		o.ClusterID = q.GetClusterId()
	}
	repl := map[int32]*keelpb.VoterReplication{}
	var leaderLast uint64
	for _, r := range q.GetReplication() {
		repl[r.GetId()] = r
		if r.GetId() == q.GetNodeId() {
			leaderLast = r.GetMatchIndex()
		}
	}
	for _, v := range q.GetVoters() {
		vv := voterView{ID: v.GetId(), Address: v.GetAddress(), Suffrage: v.GetSuffrage(), Leader: v.GetId() == q.GetLeaderId(), LastContactMs: -1}
		if r, ok := repl[v.GetId()]; ok {
			vv.Known, vv.Match, vv.LastContactMs = true, r.GetMatchIndex(), r.GetLastContactMs()
			if leaderLast > vv.Match {
				vv.Lag = leaderLast - vv.Match
			}
		}
		o.Voters = append(o.Voters, vv)
	}
	for _, b := range img.Brokers() {
		o.Brokers = append(o.Brokers, brokerView{
			ID: b.ID, Address: b.Address, KafkaAddress: b.KafkaAddress, State: b.State(), Epoch: b.Epoch, Rack: b.Rack,
			Leaders: s.leaders[b.ID], Replicas: s.replicas[b.ID], MovingOff: s.movingOff[b.ID],
		})
	}
	for _, p := range s.reassignments {
		t, _ := img.TopicByID(p.TopicID)
		o.Reassignments = append(o.Reassignments, rowOf(img, t.Name, p))
	}
	o.ReassignmentsOmitted = s.counts.Reassigning - len(s.reassignments)
	return o
}

// topicRow is one topic in the topic list.
type topicRow struct {
	Name              string `json:"name"`
	ID                string `json:"id"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	UnderReplicated   int    `json:"under_replicated"`
	Offline           int    `json:"offline"`
	Reassigning       int    `json:"reassigning"`
}

// page is one page of a list: which rows of how many.
type page struct {
	AsOf   time.Time `json:"as_of"`
	Source source    `json:"source"`
	Total  int       `json:"total"`
	Offset int       `json:"offset"`
	Limit  int       `json:"limit"`
}

// topicPage is /console/api/topics.
type topicPage struct {
	page
	Topics []topicRow `json:"topics"`
}

// topicQuery selects topics: a substring of the name, and with unhealthy
// only those with a partition under-replicated, offline or moving.
type topicQuery struct {
	match         string
	unhealthy     bool
	offset, limit int
}

// listTopics is one page of img's topics that q selects, in name order,
// and how many it selects in all.
func listTopics(img *fsm.Image, s *scan, q topicQuery) (rows []topicRow, total int) {
	rows = []topicRow{}
	n := 0
	for _, t := range img.Topics() {
		h, sick := s.topics[t.ID]
		if q.unhealthy && !sick || q.match != "" && !strings.Contains(t.Name, q.match) {
			continue
		}
		n++
		if n <= q.offset || len(rows) >= q.limit {
			continue
		}
		rf := 0
		if p, ok := img.Partition(t.ID, 0); ok {
			rf = len(p.Replicas) - len(p.AddingReplicas) // as ListTopics counts it
		}
		rows = append(rows, topicRow{
			Name: t.Name, ID: t.ID.String(), Partitions: t.Partitions, ReplicationFactor: rf,
			UnderReplicated: h.underReplicated, Offline: h.offline, Reassigning: h.reassigning,
		})
	}
	return rows, n
}

// partitionPage is /console/api/partitions: one topic's partitions.
type partitionPage struct {
	page
	Topic      string         `json:"topic"`
	Partitions []partitionRow `json:"partitions"`
}

// listPartitions is one page of topic t's partitions (only those
// under-replicated or offline with unhealthy), in order, and how many it
// selects in all. Without the filter a page reads only its own
// partitions: a topic of a million is not walked for 100 of them.
func listPartitions(img *fsm.Image, t *fsm.Topic, unhealthyOnly bool, offset, limit int) (rows []partitionRow, total int) {
	rows = []partitionRow{}
	if !unhealthyOnly {
		for i := offset; i < int(t.Partitions) && len(rows) < limit; i++ {
			if p, ok := img.Partition(t.ID, int32(i)); ok {
				rows = append(rows, rowOf(img, t.Name, p))
			}
		}
		return rows, int(t.Partitions)
	}
	for _, p := range img.Partitions(t.ID) {
		if !unhealthy(p) {
			continue
		}
		total++
		if total > offset && len(rows) < limit {
			rows = append(rows, rowOf(img, t.Name, p))
		}
	}
	return rows, total
}
