package integration

// Raft traffic from outside the quorum must never reach raft: an attacker
// holding a certificate from the cluster's CA once committed a fabricated
// topic with one AppendEntries.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/tlsauth"
)

// raftDialer is a raft stream layer that only dials: a controller's raft
// port, as Keel's own nodes reach it (the raft marker, then mutual TLS
// with cfg's certificate).
type raftDialer struct {
	cfg  *tls.Config
	done chan struct{}
	// dialed, if set, gets the connections dialled while it has room.
	dialed chan net.Conn
}

func (d *raftDialer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte{raftlog.RaftMarker}); err != nil {
		conn.Close()
		return nil, err
	}
	tc := tls.Client(conn, d.cfg)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	_ = tc.SetDeadline(time.Time{})
	select {
	case d.dialed <- tc: // nil: nobody asked
	default:
	}
	return tc, nil
}

func (d *raftDialer) Accept() (net.Conn, error) { <-d.done; return nil, net.ErrClosed }
func (d *raftDialer) Close() error              { close(d.done); return nil }
func (d *raftDialer) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// forger speaks raft to the quorum with a certificate from its CA.
type forger struct {
	trans *raft.NetworkTransport
}

func newForger(t *testing.T, cert *tlsauth.Config) *forger {
	t.Helper()
	return newForgerDialer(t, &raftDialer{cfg: cert.PeerClient(tlsauth.RoleController), done: make(chan struct{})})
}

// newForgerDialer is newForger through dialer d.
func newForgerDialer(t *testing.T, d *raftDialer) *forger {
	t.Helper()
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  d,
		MaxPool: 1,
		Timeout: 5 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	t.Cleanup(func() { trans.Close() })
	return &forger{trans: trans}
}

// appendTopic sends target (node id at addr) an AppendEntries in node as's
// name, at term, that carries a fabricated topic right after the target's
// last entry and commits it.
func (f *forger) appendTopic(target int32, addr string, as int32, term, last, lastTerm uint64, topic string) error {
	data, err := fsm.EncodeBatch(&keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{
		Name: topic, TopicId: []byte("0123456789abcdef"),
	}}})
	if err != nil {
		return err
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(raftlog.ServerID(as)), Addr: []byte(addr)},
		Term:              term,
		PrevLogEntry:      last,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last + 1,
	}
	var resp raft.AppendEntriesResponse
	if err := f.trans.AppendEntries(raftlog.ServerID(target), raft.ServerAddress(addr), req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("refused by raft itself (term %d)", resp.Term)
	}
	return nil
}

// vote asks target for a vote in node as's name at term.
func (f *forger) vote(target int32, addr string, as int32, term uint64) (*raft.RequestVoteResponse, error) {
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(raftlog.ServerID(as)), Addr: []byte(addr)},
		Term:      term,
	}
	var resp raft.RequestVoteResponse
	return &resp, f.trans.RequestVote(raftlog.ServerID(target), raft.ServerAddress(addr), req, &resp)
}

// tlsQuorum starts three controllers with mutual TLS and returns their
// CA, the active controller and its epoch, and a follower to target.
func tlsQuorum(t *testing.T) (pki *testPKI, c *Cluster, leader int32, epoch int64, target int32) {
	t.Helper()
	pki = newTestPKI(t)
	c = startCluster(t, 3, withTLS(pki))
	leader, epoch = c.WaitForActive(t, 20*time.Second)
	target = 1
	if target == leader {
		target = 3
	}
	return pki, c, leader, epoch, target
}

// TestRaftGuard_ForgedTrafficRefused: with mutual TLS, raft traffic is
// accepted only from members of the quorum:
//   - controller-9 (a certificate from the CA, not a voter) sending an
//     AppendEntries at term+1 that carries a fabricated topic is refused;
//   - a voter asking for a vote reaches raft, which answers (it does not
//     grant a stale term);
//
// afterwards the target's raft term, the epoch and the topics are what they
// were, every node agrees, and the target logged the refusal. (A voter's
// certificate lets it say anything in raft, in its own name or another's:
// raft is not Byzantine-tolerant, and the guard does not read requests.)
func TestRaftGuard_ForgedTrafficRefused(t *testing.T) {
	pki, c, leader, epoch, target := tlsQuorum(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := c.Describe(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Addr(target)
	term, last := before.GetRaftTerm(), before.GetLastIndex()

	stranger := newForger(t, pki.config("controller-9"))
	if err := stranger.appendTopic(target, addr, 9, term+1, last, term, "forged-by-9"); err == nil {
		t.Fatal("controller-9's AppendEntries was accepted")
	}
	// The third voter, neither the target nor the leader.
	imp := 6 - target - leader
	impCert := fmt.Sprintf("controller-%d", imp)
	resp, err := newForger(t, pki.config(impCert)).vote(target, addr, imp, 1)
	if err != nil {
		t.Fatalf("%s's own vote request at a stale term did not reach raft: %v", impCert, err)
	}
	if resp.Granted {
		t.Fatal("raft granted a vote at a stale term")
	}

	after, err := c.Describe(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRaftTerm() != term || after.GetControllerEpoch() != epoch {
		t.Fatalf("node %d moved from term %d, epoch %d to term %d, epoch %d", target, term, epoch, after.GetRaftTerm(), after.GetControllerEpoch())
	}
	if _, err := c.DescribeTopicE(ctx, "forged-by-9"); err == nil {
		t.Fatal("the topic forged by controller-9 exists")
	}
	// The quorum still commits, and every node agrees.
	resp2 := c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, c.IDs(), resp2.GetIndex())
	poll.Until(t, 10*time.Second, "the refusal in the target's log", func() bool {
		return strings.Contains(c.node(target).Output(), "controller-9 is not in the quorum's configuration")
	})
}

// TestRaftGuard_RemovedVoterConnectionCut: a voter's certificate is checked
// once, when its raft connection is accepted; a connection it opened while
// a member is closed once it is removed, even if it sends nothing more,
// and the quorum goes on committing.
func TestRaftGuard_RemovedVoterConnectionCut(t *testing.T) {
	pki, c, leader, _, target := tlsQuorum(t)
	removed := 6 - target - leader

	// A connection in the name of the voter about to be removed, as
	// its raft would hold one between calls: it carried one request.
	d := &raftDialer{cfg: pki.config(fmt.Sprintf("controller-%d", removed)).PeerClient(tlsauth.RoleController),
		done: make(chan struct{}), dialed: make(chan net.Conn, 1)}
	resp, err := newForgerDialer(t, d).vote(target, c.Addr(target), removed, 1)
	if err != nil || resp.Granted {
		t.Fatalf("controller-%d's vote request at a stale term: %+v, %v; want raft's refusal", removed, resp, err)
	}
	conn := <-d.dialed

	var after membershipJSON
	c.keelJSON(t, &after, "quorum", "remove-voter", strconv.Itoa(int(removed)))
	if slices.Contains(after.ids(), removed) {
		t.Fatalf("remove-voter %d: %+v", removed, after)
	}
	if code := c.waitExited(removed, 20*time.Second); code != 0 {
		t.Fatalf("removed node %d exited with status %d", removed, code)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("controller-%d's raft connection to node %d is still open after its removal: %v", removed, target, err)
	}
	resp2 := c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, []int32{leader, target}, resp2.GetIndex())
}
