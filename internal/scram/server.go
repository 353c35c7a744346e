package scram

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Credential is what a server holds of one user for one mechanism.
type Credential struct {
	Salt, StoredKey, ServerKey []byte
	Iterations                 int
}

// DecoyIterations are the iterations a server announces for a user it
// does not know: `keel user`'s default, so that the answer looks like a
// real user's.
const DecoyIterations = 8192

// decoySaltSize is the size of the salt announced for an unknown user:
// that of the salts `keel user` draws.
const decoySaltSize = 32

// Server is the server's side of one SCRAM exchange (RFC 5802 section 3):
// the client's first message, the server's first, the client's final with
// its proof, the server's final with its signature. A user it does not know
// is answered as one it does, with a salt derived from a secret, and
// refused only at the proof, as a wrong password is: the exchange tells no
// one which users exist.
type Server struct {
	m      Mechanism
	lookup func(user string) (Credential, bool)
	secret []byte

	step            int // 0: awaits client-first; 1: client-final; 2: done
	user            string
	cred            Credential
	known           bool
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	nonce           string
	// serverNonce draws the server's part of the nonce (a test's fixed
	// one for RFC 7677's vector).
	serverNonce func() (string, error)
}

// randomNonce is 24 bytes from crypto/rand, printable.
func randomNonce() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// NewServer starts an exchange for mechanism m. lookup finds a user's
// credential; secret derives the decoy salts of unknown users (a process's
// random bytes, the same for all its exchanges).
func NewServer(m Mechanism, lookup func(user string) (Credential, bool), secret []byte) *Server {
	return &Server{m: m, lookup: lookup, secret: secret, serverNonce: randomNonce}
}

// ErrFailed is wrapped by every error of an exchange that did not
// authenticate: a malformed message, an unknown user, a wrong password.
// The client learns only that (Kafka answers every such end alike); the
// wrapped detail is for the server's log.
var ErrFailed = errors.New("SCRAM authentication failed")

func failed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFailed, fmt.Sprintf(format, args...))
}

// User is the authenticated user, once Step has reported done.
func (s *Server) User() string { return s.user }

// Step takes the client's next message and returns the server's answer;
// done once the client has proven its password. An error ends the
// exchange: the client is not authenticated.
func (s *Server) Step(msg []byte) (resp []byte, done bool, err error) {
	switch s.step {
	case 0:
		resp, err = s.clientFirst(string(msg))
	case 1:
		resp, err = s.clientFinal(string(msg))
		done = err == nil
	default:
		err = failed("the exchange is over")
	}
	if err != nil {
		s.step = 2
		return nil, false, err
	}
	s.step++
	return resp, done, nil
}

// clientFirst takes gs2-header client-first-message-bare.
func (s *Server) clientFirst(msg string) ([]byte, error) {
	if !utf8.ValidString(msg) {
		return nil, failed("client-first is not UTF-8")
	}
	// gs2-header: a channel binding flag, an optional authzid.
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok || (flag != "n" && flag != "y") {
		return nil, failed("client-first: channel binding flag %q; only n and y (no channel binding) are supported", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, failed("client-first: no gs2 header")
	}
	var authzid string
	if authz != "" {
		name, ok := strings.CutPrefix(authz, "a=")
		if !ok {
			return nil, failed("client-first: authzid %q", authz)
		}
		if authzid, ok = decodeName(name); !ok {
			return nil, failed("client-first: authzid is not a saslname")
		}
	}
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, failed("client-first: want n=user,r=nonce")
	}
	user, ok := decodeName(attrs[0][2:])
	if !ok || user == "" {
		return nil, failed("client-first: the user name is empty or not a saslname")
	}
	cnonce := attrs[1][2:]
	if !printable(cnonce) {
		return nil, failed("client-first: the nonce is empty or not printable")
	}
	s.user, s.gs2Header, s.clientFirstBare = user, flag+","+authz+",", bare
	s.cred, s.known = s.lookup(user)
	// Kafka's extensions: tokenauth asks for a delegation token, which
	// Keel has none of; an authzid must be the user itself.
	for _, a := range attrs[2:] {
		if a == "tokenauth=true" {
			s.known = false
		}
	}
	if authzid != "" && authzid != user {
		s.known = false
	}
	if !s.known {
		salt := s.m.hmac(s.secret, "keel decoy salt", user)
		s.cred = Credential{Salt: salt[:min(decoySaltSize, len(salt))], Iterations: DecoyIterations,
			StoredKey: s.m.hmac(s.secret, "keel decoy stored", user), ServerKey: s.m.hmac(s.secret, "keel decoy server", user)}
	}
	snonce, err := s.serverNonce()
	if err != nil {
		return nil, failed("nonce: %v", err)
	}
	s.nonce = cnonce + snonce
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.Salt) + ",i=" + strconv.Itoa(s.cred.Iterations)
	return []byte(s.serverFirst), nil
}

// clientFinal takes c=binding,r=nonce[,extensions],p=proof.
func (s *Server) clientFinal(msg string) ([]byte, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, failed("client-final: no proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, failed("client-final: want c=binding,r=nonce")
	}
	binding, err := base64.StdEncoding.DecodeString(attrs[0][2:])
	if err != nil || string(binding) != s.gs2Header {
		return nil, failed("client-final: channel binding does not match client-first's header")
	}
	// The nonce must end with the exchange's, as Kafka checks it:
	// librdkafka sends its own nonce again before the one the server
	// answered. The proof covers the message as sent either way.
	if !strings.HasSuffix(attrs[1][2:], s.nonce) {
		return nil, failed("client-final: the nonce is not the exchange's")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != s.m.size {
		return nil, failed("client-final: the proof is not %d bytes of base64", s.m.size)
	}
	authMessage := s.clientFirstBare + "," + s.serverFirst + "," + withoutProof
	// ClientKey = proof XOR HMAC(StoredKey, AuthMessage); the proof holds
	// if H(ClientKey) is the stored key. Compared in constant time, and
	// computed for an unknown user too.
	key := s.m.hmac(s.cred.StoredKey, authMessage)
	for j := range key {
		key[j] ^= proof[j]
	}
	match := subtle.ConstantTimeCompare(s.m.digest(key), s.cred.StoredKey) == 1
	if !match || !s.known {
		return nil, failed("invalid credentials for user %q", s.user)
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(s.m.hmac(s.cred.ServerKey, authMessage))), nil
}

// decodeName undoes RFC 5802's saslname escapes (=2C for a comma, =3D for
// an equals sign); ok false for any other '='.
func decodeName(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// printable: RFC 5802's nonce, printable ASCII but the comma, not empty.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return s != ""
}
