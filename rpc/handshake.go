package rpc

import (
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-dev/keel/internal/connlimit"
)

// HandshakeTimeout bounds how long every Keel gRPC server waits for a new
// connection's TLS handshake and HTTP/2 preface (grpc.ConnectionTimeout,
// 120s by default): 3,000 connections that each sent half a TLS ClientHello
// once stayed open past 20s. Real clients finish in milliseconds.
const HandshakeTimeout = 5 * time.Second

// serverCreds are the transport credentials of a server with options o.
func serverCreds(o options) credentials.TransportCredentials {
	if o.tls == nil {
		return countedCreds{prefaceCreds{insecure.NewCredentials()}}
	}
	return countedCreds{credentials.NewTLS(o.tls.Server())}
}

// countedCreds are a server's transport credentials that, once a
// connection's handshake has succeeded, tell the listener's
// connlimit.Limiter (the controller's port, or a broker's) that its peer is
// authenticated: it no longer counts against the bound on strangers. With
// TLS that is a verified certificate from the CA. In plaintext nothing is
// ever proven; a peer that has sent the whole HTTP/2 preface (prefaceCreds)
// has at least shown it speaks gRPC.
type countedCreds struct {
	credentials.TransportCredentials
}

func (c countedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err == nil {
		connlimit.Authenticated(raw)
	}
	return conn, info, err
}

func (c countedCreds) Clone() credentials.TransportCredentials {
	return countedCreds{c.TransportCredentials.Clone()}
}

// http2Preface is what every HTTP/2 client sends first (RFC 9113, 3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// prefaceCreds make a plaintext server's handshake read the HTTP/2
// preface, within gRPC's connection deadline (HandshakeTimeout), so that a
// plaintext connection counts as a stranger's until it has sent it. The
// preface is given back to gRPC, which reads it again.
type prefaceCreds struct {
	credentials.TransportCredentials
}

func (c prefaceCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	preface := make([]byte, len(http2Preface))
	if _, err := io.ReadFull(conn, preface); err != nil {
		if err == io.EOF {
			// As gRPC's own preface read does: a load balancer's TCP
			// check connects and closes; gRPC logs nothing for io.EOF.
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("reading the HTTP/2 preface: %w", err)
	}
	if string(preface) != http2Preface {
		return nil, nil, fmt.Errorf("not an HTTP/2 preface: %q", preface)
	}
	return &prefacedConn{Conn: conn, preface: preface}, info, nil
}

func (c prefaceCreds) Clone() credentials.TransportCredentials {
	return prefaceCreds{c.TransportCredentials.Clone()}
}

// prefacedConn gives back the preface prefaceCreds read.
type prefacedConn struct {
	net.Conn
	preface []byte
}

func (c *prefacedConn) Read(p []byte) (int, error) {
	if len(c.preface) > 0 {
		n := copy(p, c.preface)
		c.preface = c.preface[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
