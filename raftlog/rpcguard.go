package raftlog

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/connlimit"
)

// Raft's request types: the byte before each request on a raft connection
// (NetworkTransport's rpcAppendEntries and so on, which it does not export).
// TestGuardedConn_PassesEveryRequestType drives a real NetworkTransport
// through the guard, so a change in raft's numbering fails there.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

// firstRequestTimeout bounds how long an inbound raft connection may take
// to deliver its first whole request. Until it has, nothing says the peer
// is a member; a connection that never sends one (a stranger who sent only
// the raft marker) is closed rather than held forever.
const firstRequestTimeout = 10 * time.Second

// guardedConn is an inbound raft connection whose requests reach raft only
// after the guard has read each one's header and let it through: raft
// reads from a pipe the guard fills, and writes its responses straight to
// the peer.
type guardedConn struct {
	net.Conn
	in        *io.PipeReader
	closeOnce sync.Once
}

// Read reads the requests the guard let through. Once the connection is
// closed here, reads fail as a closed network connection's do.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.in.Read(p)
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

func (c *guardedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		_ = c.in.Close()
	})
	return err
}

// closeNow closes the TCP connection under a TLS one without a
// close_notify (see layerConn.closeByLayer), and the pipe raft reads.
func (c *guardedConn) closeNow() {
	c.closeOnce.Do(func() {
		conn := c.Conn
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn()
		}
		_ = conn.Close()
		_ = c.in.Close()
	})
}

// guard wraps an inbound raft connection whose certificate is controller
// certID (0 in plaintext): every request is checked (checkRPC) before raft
// reads it; the first refusal closes the connection.
func (g *peerGuard) guard(conn net.Conn, certID int32) net.Conn {
	pr, pw := io.Pipe()
	go g.filter(conn, certID, pw)
	return &guardedConn{Conn: conn, in: pr}
}

// filter copies conn's requests to w one by one, each after its check.
func (g *peerGuard) filter(conn net.Conn, certID int32, w *io.PipeWriter) {
	peer := conn.RemoteAddr().String()
	// Raft reads requests the same way: a buffered reader holds the type
	// byte and an install's snapshot data, and the decoder reads exactly one
	// value from it.
	br := bufio.NewReaderSize(conn, 64<<10)
	dec := codec.NewDecoder(br, &codec.MsgpackHandle{})
	_ = conn.SetReadDeadline(time.Now().Add(g.firstRequest))
	first := true
	var peerID int32  // the node the requests named
	appended := false // whether one was an AppendEntries
	for {
		typ, id, err := g.next(br, dec, certID, w)
		if err == nil {
			peerID = id
			appended = appended || typ == rpcAppendEntries
			if first {
				_ = conn.SetReadDeadline(time.Time{})
				first = false
				// In plaintext, a first request that names a member is
				// all a peer can show: it no longer counts against the
				// port's bound on strangers. (With TLS, the handshake
				// already did.)
				connlimit.Authenticated(conn)
			}
			continue
		}
		var refusal *rpcRefusal
		switch {
		case errors.As(err, &refusal):
			g.refused(peer, "a request", refusal.err)
		case first && errors.Is(err, os.ErrDeadlineExceeded):
			g.refused(peer, "a connection", fmt.Errorf("no whole request within %v", g.firstRequest))
		case peerID != 0 && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe):
			// The peer ended it (or died): not this node, nor the guard.
			if ended := g.connEnded; ended != nil {
				ended(peerID, appended)
			}
		}
		// Raft's handler closes the connection when its read fails too;
		// closing here does not wait for it to notice.
		_ = conn.Close()
		w.CloseWithError(err)
		return
	}
}

// rpcRefusal is a request the guard refused (as opposed to a connection
// that failed).
type rpcRefusal struct{ err error }

func (r *rpcRefusal) Error() string { return r.err.Error() }

// next reads, checks and passes on one request.
// It returns the request's type and the node it named.
func (g *peerGuard) next(br *bufio.Reader, dec *codec.Decoder, certID int32, w io.Writer) (uint8, int32, error) {
	typ, err := br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	var raw codec.Raw
	if err := dec.Decode(&raw); err != nil {
		return 0, 0, err
	}
	hdr, size, err := requestHeader(typ, raw)
	if err != nil {
		return 0, 0, &rpcRefusal{err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), membersTimeout)
	defer cancel()
	id, err := g.checkRPC(ctx, certID, hdr)
	if err != nil {
		return 0, 0, &rpcRefusal{err}
	}
	if typ == rpcAppendEntries || typ == rpcInstallSnapshot {
		// As it arrives, not once raft has stored it (heardFrom).
		g.heard.mark(id, time.Now())
	}
	if _, err := w.Write([]byte{typ}); err != nil {
		return 0, 0, err
	}
	if _, err := w.Write(raw); err != nil {
		return 0, 0, err
	}
	if size > 0 {
		// An install's snapshot follows its request, unframed.
		if _, err := io.CopyN(w, br, size); err != nil {
			return 0, 0, err
		}
	}
	return typ, id, nil
}

// requestHeader decodes the header of a request of type typ, and for an
// install the size of the snapshot data that follows it.
func requestHeader(typ uint8, raw []byte) (raft.RPCHeader, int64, error) {
	h := &codec.MsgpackHandle{}
	switch typ {
	case rpcAppendEntries, rpcRequestVote, rpcTimeoutNow, rpcRequestPreVote:
		// Every request embeds RPCHeader (msgpack inlines its fields);
		// decoding into a struct with only it skips the rest (an
		// AppendEntries' entries) unread.
		var req struct{ raft.RPCHeader }
		if err := codec.NewDecoderBytes(raw, h).Decode(&req); err != nil {
			return raft.RPCHeader{}, 0, fmt.Errorf("undecodable raft request of type %d: %v", typ, err)
		}
		return req.RPCHeader, 0, nil
	case rpcInstallSnapshot:
		var req raft.InstallSnapshotRequest
		if err := codec.NewDecoderBytes(raw, h).Decode(&req); err != nil {
			return raft.RPCHeader{}, 0, fmt.Errorf("undecodable raft snapshot install: %v", err)
		}
		if req.Size < 0 {
			return raft.RPCHeader{}, 0, fmt.Errorf("raft snapshot install of %d bytes", req.Size)
		}
		return req.RPCHeader, req.Size, nil
	}
	return raft.RPCHeader{}, 0, fmt.Errorf("unknown raft request type %d", typ)
}
