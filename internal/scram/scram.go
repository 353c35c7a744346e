// Package scram is SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: the keys
// a credential stores (Kafka's ScramFormatter), and the server's side of
// one exchange (Kafka's ScramSaslServer). The controllers derive a
// credential's keys with it, `keel user` salts a password with it, and a
// broker's Kafka listener verifies logins with it. It knows nothing of
// Keel's records or connections.
package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
)

// Mechanism is one SCRAM mechanism: its SASL name and its hash.
type Mechanism struct {
	Name string
	hash func() hash.Hash
	size int
}

// The mechanisms Kafka supports.
var (
	SHA256 = Mechanism{Name: "SCRAM-SHA-256", hash: sha256.New, size: sha256.Size}
	SHA512 = Mechanism{Name: "SCRAM-SHA-512", hash: sha512.New, size: sha512.Size}
)

// ByName returns the mechanism with SASL name name.
func ByName(name string) (Mechanism, bool) {
	for _, m := range []Mechanism{SHA256, SHA512} {
		if m.Name == name {
			return m, true
		}
	}
	return Mechanism{}, false
}

// KeySize is the size of the mechanism's keys (its hash's).
func (m Mechanism) KeySize() int { return m.size }

// SaltedPassword is RFC 5802's Hi(password, salt, iterations): what a
// client sends to set a credential (KIP-554), never the password itself.
func (m Mechanism) SaltedPassword(password string, salt []byte, iterations int) ([]byte, error) {
	return pbkdf2.Key(m.hash, password, salt, iterations, m.size)
}

func (m Mechanism) hmac(key []byte, parts ...string) []byte {
	h := hmac.New(m.hash, key)
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

func (m Mechanism) digest(b []byte) []byte {
	h := m.hash()
	h.Write(b)
	return h.Sum(nil)
}

// Keys derives a credential's stored key, H(HMAC(salted, "Client Key")),
// and server key, HMAC(salted, "Server Key"), from the salted password.
func (m Mechanism) Keys(salted []byte) (storedKey, serverKey []byte) {
	return m.digest(m.hmac(salted, "Client Key")), m.hmac(salted, "Server Key")
}
