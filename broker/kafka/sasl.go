package kafka

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/scram"
)

// SASL on the Kafka listener (Kafka's SaslServerAuthenticator): SCRAM-SHA-256
// and SCRAM-SHA-512 against the credentials in the broker's replayed image.
// Before a connection that must authenticate has, only ApiVersions and
// SaslHandshake are served, then SaslAuthenticate's round trips; anything
// else closes it, as Kafka closes it. A failed authentication is answered
// SASL_AUTHENTICATION_FAILED and the connection closes after the answer.

// SASLMode says whether the listener offers SASL, and to whom it is owed.
type SASLMode string

const (
	// SASLOff: no SASL (the zero value). TLS clients need a certificate;
	// plaintext clients are anonymous.
	SASLOff SASLMode = "off"
	// SASLOptional: SASL is offered. With TLS a client without a
	// certificate connects, and must authenticate by SCRAM before anything
	// else (Kafka's SASL_SSL); one with a certificate is authenticated by
	// it. In plaintext a client may authenticate, or stay anonymous.
	SASLOptional SASLMode = "optional"
	// SASLRequired: as SASLOptional, but in plaintext every connection must
	// authenticate by SCRAM (Kafka's SASL_PLAINTEXT).
	SASLRequired SASLMode = "required"
)

// ParseSASLMode parses a --kafka-sasl value.
func ParseSASLMode(s string) (SASLMode, error) {
	switch m := SASLMode(s); m {
	case SASLOff, SASLOptional, SASLRequired:
		return m, nil
	}
	return "", fmt.Errorf("--kafka-sasl %q: want off, optional or required", s)
}

func (m SASLMode) on() bool { return m == SASLOptional || m == SASLRequired }

// API keys of the SASL requests.
const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// saslMaxReceiveSize bounds a frame before its connection has
// authenticated: Kafka's sasl.server.max.receive.size.
const saslMaxReceiveSize = 512 << 10

// saslMechanisms are the mechanisms offered, in the order SaslHandshake
// lists them.
var saslMechanisms = []string{scram.SHA512.Name, scram.SHA256.Name}

// saslFailed is Kafka's answer to every failed authentication: a wrong
// password, an unknown user and a malformed message alike.
func saslFailed(mechanism string) string {
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
}

// saslConn is a connection's SASL state.
type saslConn struct {
	// required: the connection is served nothing but ApiVersions and SASL
	// until it has authenticated; deadline is when it must have.
	required bool
	deadline time.Time
	// over: SASL is no longer possible: authenticated, or another
	// request was served first.
	over bool
	// exchange is the SCRAM exchange under way, after a SaslHandshake.
	exchange  *scram.Server
	mechanism string
	// rawTokens: the handshake was v0, so the SCRAM messages come as
	// bare size-prefixed tokens until the exchange ends (Kafka before
	// KIP-152).
	rawTokens bool
}

// saslTLS is the TLS config of a listener that offers SASL: a client
// certificate is verified (and its role checked) if one is given, and a
// client without one may connect to authenticate by SCRAM.
func saslTLS(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || verify == nil {
			return nil
		}
		return verify(cs)
	}
	return cfg
}

// newSASLSecret draws the secret the decoy salts of unknown users come
// from.
func newSASLSecret() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// startSASL sets c's SASL state once its TLS handshake (if any) is done:
// whether it must authenticate before anything else.
func (s *Server) startSASL(c *conn, verifiedCert bool) {
	if !s.cfg.SASL.on() {
		c.sasl.over = true
		return
	}
	c.sasl.required = (s.cfg.TLS != nil && !verifiedCert) || (s.cfg.TLS == nil && s.cfg.SASL == SASLRequired)
	c.sasl.deadline = time.Now().Add(handshakeTimeout)
}

// saslPending: c must still authenticate.
func (c *conn) saslPending() bool { return c.sasl.required && !c.sasl.over }

// saslGate answers the SASL requests, and refuses what a connection that
// has not authenticated may not ask. handled: the request was the gate's
// (its answer, or an error that closes the connection).
func (s *Server) saslGate(c *conn, a *answer, req kmsg.Request) (handled bool, err error) {
	switch r := req.(type) {
	case *kmsg.SASLHandshakeRequest:
		return true, s.saslHandshake(c, a, r)
	case *kmsg.SASLAuthenticateRequest:
		return true, s.saslAuthenticate(c, a, r)
	case *kmsg.ApiVersionsRequest:
		if c.sasl.exchange == nil {
			return false, nil // before the handshake, and at any time after
		}
	}
	if c.saslPending() {
		return true, fmt.Errorf("%s before SASL authentication", kmsg.NameForKey(req.Key()))
	}
	if c.sasl.exchange != nil {
		return true, fmt.Errorf("%s during a SASL exchange", kmsg.NameForKey(req.Key()))
	}
	c.sasl.over = true
	return false, nil
}

func (s *Server) saslHandshake(c *conn, a *answer, r *kmsg.SASLHandshakeRequest) error {
	if c.sasl.over || c.sasl.exchange != nil {
		return errors.New("SaslHandshake after authentication or another request")
	}
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = saslMechanisms
	a.resp = resp
	m, ok := scram.ByName(r.Mechanism)
	if !ok {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		a.closeAfter = true
		s.met.sasl(r.Mechanism, "unsupported_mechanism")
		return nil
	}
	mech, _ := fsm.ScramMechanismByName(m.Name)
	lookup := func(user string) (scram.Credential, bool) {
		cred, ok := s.cfg.Image.Image().ScramCredential(user, mech)
		if !ok {
			return scram.Credential{}, false
		}
		return scram.Credential{Salt: cred.Salt, StoredKey: cred.StoredKey, ServerKey: cred.ServerKey, Iterations: int(cred.Iterations)}, true
	}
	c.sasl.exchange, c.sasl.mechanism = scram.NewServer(m, lookup, s.saslSecret), m.Name
	c.sasl.rawTokens = r.Version == 0
	return nil
}

// saslRawToken reads one bare SASL token (after a SaslHandshake v0) and
// answers it with the next, bare too. A failure has no answer in this
// framing: the connection closes, as Kafka closes it.
func (s *Server) saslRawToken(c *conn, r io.Reader, size int32) (*answer, error) {
	if size < 0 || size > saslMaxReceiveSize {
		return nil, fmt.Errorf("SASL token of %d bytes", size)
	}
	_ = c.SetReadDeadline(c.sasl.deadline)
	token := make([]byte, size)
	if _, err := io.ReadFull(r, token); err != nil {
		return nil, err
	}
	a := &answer{ready: readyNow}
	if !s.saslStep(c, token, func(out []byte) { a.raw = append([]byte{}, out...) }) {
		a.closeAfter = true
	}
	return a, nil
}

// writeRaw writes a bare SASL token, size first.
func writeRaw(c *conn, token []byte, timeout time.Duration) error {
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(token)), uint32(len(token)))
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.w.Write(append(buf, token...)); err != nil {
		return err
	}
	return c.w.Flush()
}

func (s *Server) saslAuthenticate(c *conn, a *answer, r *kmsg.SASLAuthenticateRequest) error {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	a.resp = resp
	if c.sasl.exchange == nil || c.sasl.over {
		msg := "SaslAuthenticate without a SaslHandshake before it"
		resp.ErrorCode, resp.ErrorMessage, a.closeAfter = kerr.IllegalSaslState.Code, &msg, true
		return nil
	}
	if !s.saslStep(c, r.SASLAuthBytes, func(out []byte) { resp.SASLAuthBytes = out }) {
		msg := saslFailed(c.sasl.mechanism)
		resp.ErrorCode, resp.ErrorMessage, a.closeAfter = kerr.SaslAuthenticationFailed.Code, &msg, true
	}
	return nil
}

// saslStep takes the client's next SCRAM message and hands the answer to
// answer; false: the authentication failed. Once it succeeds the
// connection is the user's.
func (s *Server) saslStep(c *conn, msg []byte, answer func([]byte)) bool {
	out, done, err := c.sasl.exchange.Step(msg)
	if err != nil {
		s.log.Debug("kafka listener: SASL authentication failed", "remote", c.RemoteAddr().String(), "mechanism", c.sasl.mechanism, "err", err)
		s.met.sasl(c.sasl.mechanism, "failed")
		return false
	}
	answer(out)
	if done {
		// From here the connection is the user's: what it may do is the
		// authorizer's to say (allowed), unless --kafka-super-users names
		// it.
		c.principal = "User:" + c.sasl.exchange.User()
		c.super = acl.IsSuper(c.principal, s.cfg.SuperUsers)
		c.sasl.over, c.sasl.exchange, c.sasl.rawTokens = true, nil, false
		connlimit.Authenticated(c.raw)
		s.log.Debug("kafka listener: SASL authenticated", "remote", c.RemoteAddr().String(), "mechanism", c.sasl.mechanism, "principal", c.principal)
		s.met.sasl(c.sasl.mechanism, "ok")
	}
	return true
}
