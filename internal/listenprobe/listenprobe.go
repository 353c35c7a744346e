// Package listenprobe tells a process that is gone from one that lives, by
// its port. When a process dies its kernel closes its sockets, so a peer
// sees its connections close; so does a peer whose link was only reset (a
// middlebox, a proxy restart). The difference is the port: a dead
// process's refuses, a live one's accepts. Keel's two crash detectors ask
// before they act on a closed connection: raftlog's election at once when
// the leader dies, and the active controller's crash fencing of a broker.
package listenprobe

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Hold is how long an accepted probe waits to see whether the far end
// closes it at once: a TCP proxy in front of a dead process accepts,
// dials its target, is refused, and closes within a round trip, while a
// Keel port holds a new connection open, waiting for its handshake, for
// seconds.
const Hold = 20 * time.Millisecond

// ErrClosedAtOnce is Dial's error when the far end accepted the connection
// and closed it within Hold.
var ErrClosedAtOnce = errors.New("the connection was closed as soon as it was accepted")

// Dial dials addr over TCP, sends nothing, and closes the connection: nil
// if a listener accepted it and held it for Hold (or even spoke), else
// ErrClosedAtOnce, or the dial's error (a refusal, ctx's end, an
// unreachable host).
func Dial(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(Hold))
	var b [1]byte
	_, err = c.Read(b[:])
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return nil // held open, or it even spoke: something lives there
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return ErrClosedAtOnce
	}
	return err
}

// Refused reports whether err, from Dial, says that nothing listens at the
// address: the connection was refused, or closed as soon as it was
// accepted. Any other error (a timeout, an unreachable network) says
// nothing either way.
func Refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrClosedAtOnce)
}
