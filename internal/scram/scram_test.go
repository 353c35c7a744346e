package scram

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// rfc7677 is RFC 7677 section 3's SCRAM-SHA-256 exchange: user "user",
// password "pencil".
var rfc7677 = struct {
	salt                                               string
	clientFirst, serverFirst, clientFinal, serverFinal string
	serverNonce                                        string
}{
	salt:        "W22ZaJ0SNY7soEsUEjb6gQ==",
	serverNonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
	clientFirst: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
	serverFirst: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
	clientFinal: "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
	serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}

// vectorServer is a server that holds "user" with password "pencil" as
// the RFC's vector salts it, and draws the vector's nonce.
func vectorServer(t *testing.T, password string) *Server {
	t.Helper()
	salt, _ := base64.StdEncoding.DecodeString(rfc7677.salt)
	salted, err := SHA256.SaltedPassword(password, salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	stored, server := SHA256.Keys(salted)
	s := NewServer(SHA256, func(user string) (Credential, bool) {
		if user != "user" {
			return Credential{}, false
		}
		return Credential{Salt: salt, StoredKey: stored, ServerKey: server, Iterations: 4096}, true
	}, []byte("secret"))
	s.serverNonce = func() (string, error) { return rfc7677.serverNonce, nil }
	return s
}

// TestServer_RFC7677Vector: the server answers RFC 7677's exchange with
// the RFC's own messages, and authenticates the user.
func TestServer_RFC7677Vector(t *testing.T) {
	s := vectorServer(t, "pencil")
	first, done, err := s.Step([]byte(rfc7677.clientFirst))
	if err != nil || done || string(first) != rfc7677.serverFirst {
		t.Fatalf("server-first %q, %v, %v", first, done, err)
	}
	final, done, err := s.Step([]byte(rfc7677.clientFinal))
	if err != nil || !done || string(final) != rfc7677.serverFinal || s.User() != "user" {
		t.Fatalf("server-final %q, %v, %v (user %q)", final, done, err, s.User())
	}
	if _, _, err := s.Step([]byte(rfc7677.clientFinal)); !errors.Is(err, ErrFailed) {
		t.Fatalf("a step after the end: %v", err)
	}
}

// TestServer_Refuses: a wrong password, an unknown user and malformed
// messages all end the exchange with ErrFailed; an unknown user is
// answered a server-first like a known one's.
func TestServer_Refuses(t *testing.T) {
	final := rfc7677.clientFinal
	tests := []struct {
		name               string
		password           string
		clientFirst, final string
		failAtFirst        bool
	}{
		{name: "wrong password", password: "pencils", clientFirst: rfc7677.clientFirst, final: final},
		{name: "unknown user", password: "pencil", clientFirst: "n,,n=someone,r=rOprNGfwEbeRWgbNEkqO",
			final: strings.Replace(final, "c=biws", "c=biws", 1)},
		{name: "authzid of another user", password: "pencil", clientFirst: "n,a=admin,n=user,r=rOprNGfwEbeRWgbNEkqO",
			final: strings.Replace(final, "c=biws", "c="+base64.StdEncoding.EncodeToString([]byte("n,a=admin,")), 1)},
		{name: "delegation token asked", password: "pencil", clientFirst: rfc7677.clientFirst + ",tokenauth=true", final: final},
		{name: "client-first: channel binding required", password: "pencil", clientFirst: "p=tls-unique,,n=user,r=abc", failAtFirst: true},
		{name: "client-first: no gs2 header", password: "pencil", clientFirst: "n=user,r=abc", failAtFirst: true},
		{name: "client-first: no nonce", password: "pencil", clientFirst: "n,,n=user", failAtFirst: true},
		{name: "client-first: empty user", password: "pencil", clientFirst: "n,,n=,r=abc", failAtFirst: true},
		{name: "client-first: bad escape", password: "pencil", clientFirst: "n,,n=us=er,r=abc", failAtFirst: true},
		{name: "client-first: nonce with a space", password: "pencil", clientFirst: "n,,n=user,r=a c", failAtFirst: true},
		{name: "client-first: mandatory extension", password: "pencil", clientFirst: "n,,m=x,n=user,r=abc", failAtFirst: true},
		{name: "client-first: not UTF-8", password: "pencil", clientFirst: "n,,n=\xff,r=abc", failAtFirst: true},
		{name: "client-first: empty", password: "pencil", clientFirst: "", failAtFirst: true},
		{name: "client-final: no proof", password: "pencil", clientFirst: rfc7677.clientFirst, final: final[:strings.Index(final, ",p=")]},
		{name: "client-final: proof not base64", password: "pencil", clientFirst: rfc7677.clientFirst, final: final[:strings.Index(final, ",p=")] + ",p=!!"},
		{name: "client-final: short proof", password: "pencil", clientFirst: rfc7677.clientFirst, final: final[:strings.Index(final, ",p=")] + ",p=AAAA"},
		{name: "client-final: a nonce that does not end with the exchange's", password: "pencil", clientFirst: rfc7677.clientFirst,
			final: strings.Replace(final, "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0x", 1)},
		{name: "client-final: another nonce", password: "pencil", clientFirst: rfc7677.clientFirst, final: strings.Replace(final, "k0,p=", "k1,p=", 1)},
		{name: "client-final: binding differs", password: "pencil", clientFirst: rfc7677.clientFirst, final: strings.Replace(final, "c=biws", "c=eSws", 1)},
		{name: "client-final: attributes out of order", password: "pencil", clientFirst: rfc7677.clientFirst, final: "r=x,c=biws,p=AAAA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := vectorServer(t, tt.password)
			first, _, err := s.Step([]byte(tt.clientFirst))
			if tt.failAtFirst {
				if !errors.Is(err, ErrFailed) {
					t.Fatalf("client-first: err = %v", err)
				}
				return
			}
			if err != nil || !bytes.HasPrefix(first, []byte("r=rOprNGfwEbeRWgbNEkqO")) || !bytes.Contains(first, []byte(",i=")) {
				t.Fatalf("server-first %q, %v", first, err)
			}
			if resp, done, err := s.Step([]byte(tt.final)); !errors.Is(err, ErrFailed) || done || resp != nil {
				t.Fatalf("client-final: %q, %v, %v", resp, done, err)
			}
		})
	}
}

// TestServer_UnknownUserLooksKnown: an unknown user's server-first has a
// salt of a real one's size and the default iterations, the same on every
// try (a changing salt would tell), and another for another user.
func TestServer_UnknownUserLooksKnown(t *testing.T) {
	salt := func(user string) string {
		s := NewServer(SHA512, func(string) (Credential, bool) { return Credential{}, false }, []byte("secret"))
		first, _, err := s.Step([]byte("n,,n=" + user + ",r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(first), ",")
		if len(parts) != 3 || parts[2] != "i=8192" {
			t.Fatalf("server-first %q", first)
		}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(parts[1], "s="))
		if len(raw) != decoySaltSize {
			t.Fatalf("decoy salt of %d bytes", len(raw))
		}
		return parts[1]
	}
	first, again := salt("ghost"), salt("ghost")
	if first != again || first == salt("phantom") {
		t.Fatal("decoy salts are not stable per user")
	}
}

// TestDecodeName: RFC 5802's saslname escapes.
func TestDecodeName(t *testing.T) {
	for in, want := range map[string]string{"a=2Cb=3Dc": "a,b=c", "plain": "plain", "=3D=3D": "=="} {
		if got, ok := decodeName(in); !ok || got != want {
			t.Errorf("decodeName(%q) = %q, %v", in, got, ok)
		}
	}
	for _, in := range []string{"a=", "a=2", "a=41"} {
		if _, ok := decodeName(in); ok {
			t.Errorf("decodeName(%q) accepted", in)
		}
	}
}

// BenchmarkServer_Exchange: the server's work for one RFC 7677 login (no
// PBKDF2 on the server: the client salts).
func BenchmarkServer_Exchange(b *testing.B) {
	salt, _ := base64.StdEncoding.DecodeString(rfc7677.salt)
	salted, _ := SHA256.SaltedPassword("pencil", salt, 4096)
	stored, server := SHA256.Keys(salted)
	lookup := func(string) (Credential, bool) {
		return Credential{Salt: salt, StoredKey: stored, ServerKey: server, Iterations: 4096}, true
	}
	for b.Loop() {
		s := NewServer(SHA256, lookup, []byte("secret"))
		s.serverNonce = func() (string, error) { return rfc7677.serverNonce, nil }
		if _, _, err := s.Step([]byte(rfc7677.clientFirst)); err != nil {
			b.Fatal(err)
		}
		if _, done, err := s.Step([]byte(rfc7677.clientFinal)); err != nil || !done {
			b.Fatal(err)
		}
	}
}
