package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/keel-dev/keel/fsm"
	iscram "github.com/keel-dev/keel/internal/scram"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// startSCRAMServer starts a listener with mutate's config on a fake
// metadata image raised to the level that holds SCRAM credentials, with a
// topic it leads.
func startSCRAMServer(t *testing.T, mutate func(*Config)) (*Server, *fakeMeta) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), mutate)
	// The broker again, able to read every level, then the level.
	meta.must(&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: 1, IncarnationId: "inc-1b", Address: "127.0.0.1:9201", KafkaAddress: s.Addr(),
		MinMetadataVersion: 1, MaxMetadataVersion: fsm.MaxMetadataVersion}}})
	b, _ := meta.Image().Broker(1)
	meta.must(&keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 1, BrokerEpoch: b.Epoch}}})
	meta.must(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.MaxMetadataVersion}}})
	meta.createTopic("orders", []int32{1})
	return s, meta
}

// allowTopics lets principal do everything to every topic (an ACL), as an
// operator grants an application: a SCRAM login is authorized like any
// other principal.
func allowTopics(meta *fakeMeta, principal string) {
	id := make([]byte, 16)
	copy(id, principal)
	meta.must(&keelpb.Record{Record: &keelpb.Record_Acl{Acl: &keelpb.AccessControlEntryRecord{
		Id: id, ResourceType: int32(kmsg.ACLResourceTypeTopic), ResourceName: "*", PatternType: int32(kmsg.ACLResourcePatternTypeLiteral),
		Principal: principal, Host: "*", Operation: int32(kmsg.ACLOperationAll), PermissionType: int32(kmsg.ACLPermissionTypeAllow)}}})
}

// setUser gives user password for both mechanisms, through the admin API
// as an anonymous plaintext admin would.
func setUser(t *testing.T, adm *kadm.Client, user, password string) {
	t.Helper()
	res, err := adm.AlterUserSCRAMs(context.Background(), nil, []kadm.UpsertSCRAM{
		{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password},
		{User: user + "-256", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: password},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v %s", r.User, r.Err, r.ErrMessage)
		}
	}
}

func scramOpt(m sasl.Mechanism) kgo.Opt { return kgo.SASL(m) }

// metadataErr is the error of one Metadata request with cl: a client
// refused at its connection fails within its retry timeout.
func metadataErr(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

// produceOne produces one record to orders with cl.
func produceOne(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr()
}

// TestServer_SASLSCRAM: on a plaintext listener with SASL required,
// franz-go logs in with SCRAM-SHA-512 and -256 and produces and consumes;
// a wrong password and an unknown user get SASL_AUTHENTICATION_FAILED with
// Kafka's message, alike; a client that does not authenticate is served
// nothing; a removed credential no longer logs in.
func TestServer_SASLSCRAM(t *testing.T) {
	s, meta := startSCRAMServer(t, func(c *Config) { c.SASL = SASLRequired })
	addrs := []string{s.Addr()}
	for _, m := range []keelpb.ScramMechanism{keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512, keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256} {
		mech, _ := iscram.ByName(fsm.ScramMechanismName(m))
		salted, err := mech.SaltedPassword("secret", []byte("salt"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		user := map[keelpb.ScramMechanism]string{keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512: "alice"}[m]
		if user == "" {
			user = "alice-256"
		}
		if _, err := meta.AlterUserScramCredentials(context.Background(), &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
			{Name: user, Mechanism: m, Iterations: 4096, Salt: []byte("salt"), SaltedPassword: salted}}}); err != nil {
			t.Fatal(err)
		}
		allowTopics(meta, "User:"+user)
	}

	for name, m := range map[string]sasl.Mechanism{
		"SCRAM-SHA-512": scram.Auth{User: "alice", Pass: "secret"}.AsSha512Mechanism(),
		"SCRAM-SHA-256": scram.Auth{User: "alice-256", Pass: "secret"}.AsSha256Mechanism(),
	} {
		if err := produceOne(newClient(t, addrs, scramOpt(m))); err != nil {
			t.Fatalf("%s: produce: %v", name, err)
		}
	}
	reader := newClient(t, addrs, scramOpt(scram.Auth{User: "alice", Pass: "secret"}.AsSha512Mechanism()),
		kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for n := 0; n < 2; {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 2 records: %v", n, fs.Errors())
		}
		n += fs.NumRecords()
	}

	refusal := func(m sasl.Mechanism) error {
		return metadataErr(newClient(t, addrs, scramOpt(m), kgo.RetryTimeout(time.Second)))
	}
	wrong := refusal(scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism())
	unknown := refusal(scram.Auth{User: "mallory", Pass: "secret"}.AsSha512Mechanism())
	for what, err := range map[string]error{"a wrong password": wrong, "an unknown user": unknown} {
		if !errors.Is(err, kerr.SaslAuthenticationFailed) ||
			!strings.Contains(err.Error(), "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512") {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if wrong.Error() != unknown.Error() {
		t.Fatalf("a wrong password and an unknown user are told apart: %q, %q", wrong, unknown)
	}
	// No SASL at all: ApiVersions, then a Metadata that closes the
	// connection.
	if err := metadataErr(newClient(t, addrs, kgo.RetryTimeout(time.Second))); err == nil {
		t.Fatal("a client that did not authenticate produced")
	}

	if _, err := meta.AlterUserScramCredentials(context.Background(), &keelpb.AlterUserScramCredentialsRequest{
		Deletions: []*keelpb.ScramCredentialDeletion{{Name: "alice", Mechanism: keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512}}}); err != nil {
		t.Fatal(err)
	}
	if err := refusal(scram.Auth{User: "alice", Pass: "secret"}.AsSha512Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a removed credential: %v", err)
	}
}

// TestServer_SASLOverTLS: with SASL offered on a TLS listener (SASL_SSL), a
// client without a certificate logs in by SCRAM and gets its user's
// principal, not an admin's; one with a certificate is authenticated by
// it; a client with neither is served nothing, and a probe's certificate
// is still refused.
func TestServer_SASLOverTLS(t *testing.T) {
	ca, err := tlsauth.NewCA("sasl test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"broker-1", "broker-2", "admin", "probe"} {
		if certs[cn], err = ca.Config(cn, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	s, meta := startSCRAMServer(t, func(c *Config) { c.TLS, c.SASL = certs["broker-1"], SASLOptional })
	addrs := []string{s.Addr()}
	withCert := func(cn string) kgo.Opt { return kgo.DialTLSConfig(certs[cn].Client(tlsauth.RoleBroker)) }
	noCert := certs["admin"].Client(tlsauth.RoleBroker)
	noCert.Certificates = nil

	adm := kadm.NewClient(newClient(t, addrs, withCert("admin")))
	setUser(t, adm, "app", "pw")
	allowTopics(meta, "User:app")
	app := newClient(t, addrs, kgo.DialTLSConfig(noCert), kgo.SASL(scram.Auth{User: "app", Pass: "pw"}.AsSha512Mechanism()))
	if err := produceOne(app); err != nil {
		t.Fatalf("SCRAM over TLS without a certificate: %v", err)
	}
	// The SCRAM user is no admin.
	res, err := kadm.NewClient(app).AlterUserSCRAMs(context.Background(), []kadm.DeleteSCRAM{{User: "app", Mechanism: kadm.ScramSha512}}, nil)
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(res["app"].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("a SCRAM user altered credentials: %v %v", res, err)
	}
	if err := produceOne(newClient(t, addrs, withCert("broker-2"))); err != nil {
		t.Fatalf("a certificate without SASL: %v", err)
	}
	for what, opt := range map[string]kgo.Opt{"neither certificate nor SASL": kgo.DialTLSConfig(noCert), "a probe's certificate": withCert("probe")} {
		if err := metadataErr(newClient(t, addrs, opt, kgo.RetryTimeout(time.Second))); err == nil {
			t.Fatalf("%s: produced", what)
		}
	}
}

// TestServer_SCRAMCredentialAPIs: DescribeUserScramCredentials shows each
// user's mechanisms and iterations (never a salt or a key) with Kafka's
// per-user errors; AlterUserScramCredentials is forwarded with the
// client's principal.
func TestServer_SCRAMCredentialAPIs(t *testing.T) {
	s, meta := startSCRAMServer(t, nil)
	adm := kadm.NewClient(newClient(t, []string{s.Addr()}))
	setUser(t, adm, "alice", "pw")
	ctx := context.Background()
	all, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil || len(all) != 2 || len(all["alice"].CredInfos) != 1 || all["alice"].CredInfos[0] != (kadm.CredInfo{Mechanism: kadm.ScramSha512, Iterations: 4096}) ||
		all["alice-256"].CredInfos[0].Mechanism != kadm.ScramSha256 {
		t.Fatalf("describe all: %+v, %v", all, err)
	}
	some, err := adm.DescribeUserSCRAMs(ctx, "alice", "nobody")
	if err != nil || some["alice"].Err != nil || !errors.Is(some["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe alice, nobody: %+v, %v", some, err)
	}
	req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	for _, u := range []string{"alice", "alice"} {
		ru := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		ru.Name = u
		req.Users = append(req.Users, ru)
	}
	resp, err := req.RequestWith(ctx, newClient(t, []string{s.Addr()}))
	if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != kerr.DuplicateResource.Code {
		t.Fatalf("a user described twice: %+v, %v", resp, err)
	}
	if got := meta.forwardedPrincipals(); len(got) != 1 || got[0] != "User:ANONYMOUS" {
		t.Fatalf("principals forwarded: %q", got)
	}
}

// rawRequest writes one request with a v1 header (v2 for flexible ones)
// and reads one answer's body; io.EOF when the broker closed instead.
func saslRoundTrip(t *testing.T, c net.Conn, r *bufio.Reader, req kmsg.Request, corr int32) ([]byte, error) {
	t.Helper()
	body := []byte{}
	body = binary.BigEndian.AppendUint16(body, uint16(req.Key()))
	body = binary.BigEndian.AppendUint16(body, uint16(req.GetVersion()))
	body = binary.BigEndian.AppendUint32(body, uint32(corr))
	body = binary.BigEndian.AppendUint16(body, 0xffff) // null client id
	if req.IsFlexible() {
		body = append(body, 0)
	}
	body = req.AppendTo(body)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := c.Write(append(frame, body...)); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	out := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, err
	}
	out = out[4:] // past the correlation id
	if req.IsFlexible() && req.Key() != 18 {
		out = out[1:] // the response header's tags
	}
	return out, nil
}

// TestServer_SASLStateMachine: Kafka's SaslServerAuthenticator states on
// the wire: only ApiVersions and SaslHandshake before authentication,
// anything else closes the connection; an unknown mechanism is answered
// UNSUPPORTED_SASL_MECHANISM with the ones offered, then the connection
// closes; so does one that does not finish in time.
func TestServer_SASLStateMachine(t *testing.T) {
	s, _ := startSCRAMServer(t, func(c *Config) { c.SASL = SASLRequired })
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	handshake := func(mech string) *kmsg.SASLHandshakeRequest {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Version, r.Mechanism = 1, mech
		return r
	}

	t.Run("ApiVersions, then a Metadata closes", func(t *testing.T) {
		c, r := dial()
		av := kmsg.NewPtrApiVersionsRequest()
		body, err := saslRoundTrip(t, c, r, av, 1)
		if err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("ApiVersions: %v %v", resp.ErrorCode, err)
		}
		sasl := map[int16][2]int16{}
		for _, k := range resp.ApiKeys {
			if k.ApiKey == 17 || k.ApiKey == 36 {
				sasl[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
			}
		}
		if sasl[17] != [2]int16{0, 1} || sasl[36] != [2]int16{0, 2} {
			t.Fatalf("SASL versions listed: %v; want SaslHandshake 0-1, SaslAuthenticate 0-2", sasl)
		}
		if _, err := saslRoundTrip(t, c, r, kmsg.NewPtrMetadataRequest(), 2); err == nil {
			t.Fatal("a Metadata before authentication was answered")
		}
	})
	t.Run("unknown mechanism", func(t *testing.T) {
		c, r := dial()
		body, err := saslRoundTrip(t, c, r, handshake("PLAIN"), 1)
		if err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrSASLHandshakeResponse()
		resp.Version = 1
		if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code ||
			strings.Join(resp.SupportedMechanisms, ",") != "SCRAM-SHA-512,SCRAM-SHA-256" {
			t.Fatalf("handshake: %+v, %v", resp, err)
		}
		if _, err := saslRoundTrip(t, c, r, kmsg.NewPtrApiVersionsRequest(), 2); err == nil {
			t.Fatal("the connection stayed open")
		}
	})
	t.Run("malformed client-first", func(t *testing.T) {
		c, r := dial()
		if _, err := saslRoundTrip(t, c, r, handshake("SCRAM-SHA-256"), 1); err != nil {
			t.Fatal(err)
		}
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.Version, auth.SASLAuthBytes = 2, []byte("garbage")
		body, err := saslRoundTrip(t, c, r, auth, 2)
		if err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		resp.Version = 2
		if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("authenticate: %+v, %v", resp, err)
		}
		if _, err := saslRoundTrip(t, c, r, kmsg.NewPtrApiVersionsRequest(), 3); err == nil {
			t.Fatal("the connection stayed open")
		}
	})
	t.Run("a v0 handshake, then bare tokens", func(t *testing.T) {
		meta := s.cfg.Image.(*fakeMeta)
		salted, err := iscram.SHA256.SaltedPassword("pw", []byte("salt"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := meta.AlterUserScramCredentials(context.Background(), &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
			{Name: "v0", Mechanism: keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256, Iterations: 4096, Salt: []byte("salt"), SaltedPassword: salted}}}); err != nil {
			t.Fatal(err)
		}
		c, r := dial()
		hs := handshake("SCRAM-SHA-256")
		hs.Version = 0
		if _, err := saslRoundTrip(t, c, r, hs, 1); err != nil {
			t.Fatal(err)
		}
		bare := func(token []byte) ([]byte, error) {
			if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(token))), token...)); err != nil {
				return nil, err
			}
			var size [4]byte
			if _, err := io.ReadFull(r, size[:]); err != nil {
				return nil, err
			}
			out := make([]byte, binary.BigEndian.Uint32(size[:]))
			_, err := io.ReadFull(r, out)
			return out, err
		}
		session, first, err := scram.Auth{User: "v0", Pass: "pw"}.AsSha256Mechanism().Authenticate(context.Background(), s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		for msg, done := first, false; !done; {
			answer, err := bare(msg)
			if err != nil {
				t.Fatalf("bare token: %v", err)
			}
			if done, msg, err = session.Challenge(answer); err != nil {
				t.Fatalf("the server's token: %v", err)
			}
			if done {
				break
			}
		}
		// Authenticated: a Metadata is served.
		if _, err := saslRoundTrip(t, c, r, kmsg.NewPtrMetadataRequest(), 9); err != nil {
			t.Fatalf("Metadata after a v0 login: %v", err)
		}
	})
	t.Run("an exchange that does not finish", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the handshake timeout")
		}
		c, r := dial()
		if _, err := saslRoundTrip(t, c, r, handshake("SCRAM-SHA-256"), 1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(3 * handshakeTimeout))
		if _, err := r.ReadByte(); err == nil || time.Since(start) > 2*handshakeTimeout {
			t.Fatalf("read %v after %v; want the connection closed by the handshake timeout", err, time.Since(start))
		}
	})
}
