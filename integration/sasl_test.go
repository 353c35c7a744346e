package integration

// SASL/SCRAM on the brokers' Kafka listeners (issue 29), with real
// processes over TLS: users made with `keel user` and through Kafka's
// AlterUserScramCredentials log in without a certificate (SASL_SSL) on
// every broker; a wrong password and a removed credential are refused.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/keel-dev/keel/internal/poll"
)

// noCertTLS verifies the brokers by the CA of pki and presents no
// certificate: a client that can only log in by SASL.
func noCertTLS(pki *testPKI) kgo.Opt {
	cfg := pki.config("admin").Client()
	return kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: cfg.RootCAs})
}

// keelUser runs `keel user ARGS` as the admin; password, when set, is
// given in a file. It fails the test unless the command exits 0.
func keelUser(t *testing.T, c *Cluster, password string, args ...string) string {
	t.Helper()
	args = append([]string{"user"}, args...)
	if password != "" {
		f := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(f, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--password-file", f)
	}
	stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs(args...)...)
	if code != 0 {
		t.Fatalf("keel %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// loginErr is the error of one Metadata request sent to the broker at
// addr alone by a client that logs in with m: nil once it logged in.
func loginErr(t *testing.T, pki *testPKI, addr string, m sasl.Mechanism) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), noCertTLS(pki), kgo.SASL(m), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.SeedBrokers()[0])
	return err
}

// TestSASL_SCRAMOverTLS: `keel user add` makes SCRAM-SHA-512 and -256
// users; a client without a certificate logs in with each on every broker
// and produces and consumes; a wrong password gets
// SASL_AUTHENTICATION_FAILED; kadm's DescribeUserScramCredentials shows
// mechanisms and iterations; AlterUserScramCredentials through a broker
// makes a user that logs in, and answers bad input per user with Kafka's
// errors; `keel user remove` ends the logins on every broker.
func TestSASL_SCRAMOverTLS(t *testing.T) {
	pki := newTestPKI(t)
	ids := []int32{1, 2, 3}
	c, kafka := startKafkaCluster(t, ids, withTLS(pki))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	keelUser(t, c, "orders-secret", "add", "app-orders")
	keelUser(t, c, "audit-secret", "add", "app-audit", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096")
	var listed []struct {
		User       string `json:"user"`
		Mechanism  string `json:"mechanism"`
		Iterations int32  `json:"iterations"`
	}
	if err := json.Unmarshal([]byte(keelUser(t, c, "", "list", "-o", "json", "--linearizable")), &listed); err != nil || len(listed) != 2 ||
		listed[0].User != "app-audit" || listed[0].Mechanism != "SCRAM-SHA-256" || listed[0].Iterations != 4096 ||
		listed[1].User != "app-orders" || listed[1].Mechanism != "SCRAM-SHA-512" || listed[1].Iterations != 8192 {
		t.Fatalf("keel user list: %+v, %v", listed, err)
	}

	orders := scram.Auth{User: "app-orders", Pass: "orders-secret"}.AsSha512Mechanism()
	audit := scram.Auth{User: "app-audit", Pass: "audit-secret"}.AsSha256Mechanism()
	for _, id := range ids {
		for _, m := range []sasl.Mechanism{orders, audit} {
			poll.Until(t, 10*time.Second, "a SCRAM login on broker "+kafka[id], func() bool { return loginErr(t, pki, kafka[id], m) == nil })
		}
	}

	adm := kafkaAdmin(t, kafka, kafkaTLS(pki, "admin"))
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "sasl-orders"); err != nil {
		t.Fatal(err)
	}
	// A login is a principal like any other: authorized by ACLs.
	grantTopic(t, c, kafka, "User:app-orders", "sasl-orders", []string{"WRITE"}, kafkaTLS(pki, "admin"))
	grantTopic(t, c, kafka, "User:app-audit", "sasl-orders", []string{"READ"}, kafkaTLS(pki, "admin"))
	producer := kafkaClient(t, kafka, noCertTLS(pki), kgo.SASL(orders), kgo.DefaultProduceTopic("sasl-orders"))
	for _, v := range []string{"a", "b", "c"} {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce as app-orders: %v", err)
		}
	}
	consumer := kafkaClient(t, kafka, noCertTLS(pki), kgo.SASL(audit), kgo.ConsumeTopics("sasl-orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for n := 0; n < 3; {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 3 records as app-audit: %v", n, fs.Errors())
		}
		n += fs.NumRecords()
	}

	wrong := loginErr(t, pki, kafka[2], scram.Auth{User: "app-orders", Pass: "guess"}.AsSha512Mechanism())
	unknown := loginErr(t, pki, kafka[2], scram.Auth{User: "nobody", Pass: "guess"}.AsSha512Mechanism())
	if !errors.Is(wrong, kerr.SaslAuthenticationFailed) || !errors.Is(unknown, kerr.SaslAuthenticationFailed) || wrong.Error() != unknown.Error() {
		t.Fatalf("a wrong password: %v; an unknown user: %v", wrong, unknown)
	}

	described, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil || len(described) != 2 || described["app-orders"].CredInfos[0] != (kadm.CredInfo{Mechanism: kadm.ScramSha512, Iterations: 8192}) ||
		described["app-audit"].CredInfos[0] != (kadm.CredInfo{Mechanism: kadm.ScramSha256, Iterations: 4096}) {
		t.Fatalf("DescribeUserScramCredentials: %+v, %v", described, err)
	}

	// Through the Kafka API, forwarded to the active controller. kadm
	// salts the password; the bad input goes as a client's own bytes.
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "app-kafka", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "kafka-secret"}})
	if err != nil || altered["app-kafka"].Err != nil {
		t.Fatalf("AlterUserScramCredentials: %+v, %v", altered, err)
	}
	bad := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	for _, d := range []struct {
		user string
		mech int8
	}{{"ghost", 2}, {"app-audit", 7}} {
		rd := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
		rd.Name, rd.Mechanism = d.user, d.mech
		bad.Deletions = append(bad.Deletions, rd)
	}
	for _, u := range []struct {
		user       string
		iterations int32
	}{{"app-cheap", 16385}, {"app-twice", 4096}, {"app-twice", 4096}} {
		ru := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		ru.Name, ru.Mechanism, ru.Iterations, ru.Salt, ru.SaltedPassword = u.user, 2, u.iterations, []byte("salt"), []byte("salted")
		bad.Upsertions = append(bad.Upsertions, ru)
	}
	badResp, err := bad.RequestWith(ctx, kafkaClient(t, kafka, kafkaTLS(pki, "admin")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{"ghost": kerr.ResourceNotFound.Code, "app-audit": kerr.UnsupportedSaslMechanism.Code,
		"app-cheap": kerr.UnacceptableCredential.Code, "app-twice": kerr.DuplicateResource.Code}
	got := map[string]int16{}
	for _, r := range badResp.Results {
		got[r.User] = r.ErrorCode
	}
	if len(got) != len(want) || len(badResp.Results) != len(want) {
		t.Fatalf("bad input: results %v, want %v", got, want)
	}
	for u, code := range want {
		if got[u] != code {
			t.Fatalf("bad input: %s got %v, want %v", u, kerr.ErrorForCode(got[u]), kerr.ErrorForCode(code))
		}
	}
	// Nothing of it was written: the users are the three made so far.
	if d, err := adm.DescribeUserSCRAMs(ctx); err != nil || len(d) != 3 || len(d["app-audit"].CredInfos) != 1 {
		t.Fatalf("after the bad input: %+v, %v", d, err)
	}
	poll.Until(t, 10*time.Second, "app-kafka's login", func() bool {
		return loginErr(t, pki, kafka[3], scram.Auth{User: "app-kafka", Pass: "kafka-secret"}.AsSha512Mechanism()) == nil
	})
	// A SCRAM user is no operator: it may not alter credentials.
	own, err := kadm.NewClient(producer).AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "app-audit", Mechanism: kadm.ScramSha256}}, nil)
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(own["app-audit"].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("app-orders altered a credential: %+v, %v", own, err)
	}

	expectRefused(t, "", c.adminArgs("user", "remove", "nobody"), `user "nobody": RESOURCE_NOT_FOUND`)
	keelUser(t, c, "", "remove", "app-orders")
	for _, id := range ids {
		poll.Until(t, 10*time.Second, "the removed credential refused on broker "+kafka[id], func() bool {
			return errors.Is(loginErr(t, pki, kafka[id], orders), kerr.SaslAuthenticationFailed)
		})
	}
	if err := loginErr(t, pki, kafka[1], audit); err != nil {
		t.Fatalf("app-audit after app-orders was removed: %v", err)
	}
}

// TestKcat_SASLSSLSCRAM512: kcat (librdkafka) with security.protocol
// SASL_SSL and SCRAM-SHA-512, no certificate, produces and consumes; with a
// wrong password it fails to authenticate.
func TestKcat_SASLSSLSCRAM512(t *testing.T) {
	kcat := kcatPath(t)
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, []int32{1}, withTLS(pki))
	keelUser(t, c, "kcat-secret", "add", "kcat-user")
	topicArgs := c.adminArgs("topic", "create", "kcat-sasl", "--partitions", "1", "--replication-factor", "1")
	if stdout, stderr, code := runKeel(t, 30*time.Second, topicArgs...); code != 0 {
		t.Fatalf("topic create: %s%s", stdout, stderr)
	}
	args := func(password string, rest ...string) []string {
		return append([]string{"-b", kafka[1], "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=kcat-user", "-X", "sasl.password=" + password, "-X", "ssl.ca.location=" + pki.certFiles("admin").CA}, rest...)
	}
	grantTopic(t, c, kafka, "User:kcat-user", "kcat-sasl", []string{"WRITE", "READ"}, kafkaTLS(pki, "admin"))
	mustKcat(t, kcat, "one\ntwo\n", args("kcat-secret", "-P", "-t", "kcat-sasl")...)
	out := mustKcat(t, kcat, "", args("kcat-secret", "-C", "-t", "kcat-sasl", "-o", "beginning", "-c", "2", "-e")...)
	if out != "one\ntwo\n" {
		t.Fatalf("kcat consumed %q", out)
	}
	_, stderr, err := runKcat(t, kcat, "", args("wrong", "-L", "-m", "5")...)
	if err == nil || !strings.Contains(stderr, "Authentication failed") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, stderr)
	}
}

// TestSASL_RefusesBadInput: keel user and --kafka-sasl refuse bad input in
// one line, before anything is sent or started.
func TestSASL_RefusesBadInput(t *testing.T) {
	listen := freeAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"an unknown --kafka-sasl", append(brokerArgs(1, listen, t.TempDir(), []string{freeAddr(t)}), "--kafka-listen", freeAddr(t), "--kafka-sasl", "maybe"),
			[]string{`--kafka-sasl "maybe": want off, optional or required`}},
		{"too few iterations", []string{"user", "add", "app", "--iterations", "100"}, []string{"--iterations 100: want 4096 to 16384"}},
		{"an unknown mechanism", []string{"user", "add", "app", "--mechanism", "MD5"}, []string{`--mechanism "MD5": want SCRAM-SHA-256 or SCRAM-SHA-512`}},
		{"no password", []string{"user", "add", "app"}, []string{"no password on stdin"}},
		{"a password file that is not there", []string{"user", "add", "app", "--password-file", filepath.Join(t.TempDir(), "none")}, []string{"--password-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) { expectRefused(t, "", tc.args, tc.want...) })
	}
}
