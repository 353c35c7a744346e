package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/tlsauth"
)

// TestServer_TLS: with the broker's certificate the listener speaks TLS
// and takes clients holding a certificate of the cluster's CA: a broker's
// (or any keel identity's) may produce and consume, only an admin's may
// create topics, forwarded to the controller with its principal, and a
// probe's is refused at the handshake.
func TestServer_TLS(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"broker-1", "broker-2", "admin", "probe"} {
		if certs[cn], err = ca.Config(cn, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.TLS = certs["broker-1"] })
	meta.createTopic("secure", []int32{1})
	client := func(cn string, opts ...kgo.Opt) *kgo.Client {
		return newClient(t, []string{s.Addr()}, append(opts, kgo.DialTLSConfig(certs[cn].Client(tlsauth.RoleBroker)))...)
	}
	createTopic := func(cl *kgo.Client, name string) int16 {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}

	app := client("broker-2", kgo.DefaultProduceTopic("secure"))
	if err := app.ProduceSync(context.Background(), &kgo.Record{Value: []byte("over TLS")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	reader := client("broker-2", kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if fs := reader.PollFetches(ctx); fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "over TLS" {
		t.Fatalf("consumed %d records (errors %v)", fs.NumRecords(), fs.Errors())
	}
	// Every keel role's certificate is a super user's on the listener;
	// the controller decides on what it forwards.
	if code := createTopic(app, "by-a-broker"); code != 0 {
		t.Fatalf("CreateTopics with a broker's certificate: %v", kerr.ErrorForCode(code))
	}
	if code := createTopic(client("admin"), "by-an-admin"); code != 0 {
		t.Fatalf("CreateTopics with an admin's certificate: %v", kerr.ErrorForCode(code))
	}
	// The controller authorizes the client, not this broker (KIP-590): the
	// request it gets names the client, in Kafka's form.
	if got := meta.forwardedPrincipals(); !slices.Equal(got, []string{"User:broker-2", "User:admin"}) {
		t.Fatalf("principals forwarded to the controller: %q; want [User:broker-2 User:admin]", got)
	}
	refused := func(cl *kgo.Client) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
		return err != nil
	}
	if !refused(client("probe")) {
		t.Fatal("a probe's certificate was let in")
	}
	if !refused(newClient(t, []string{s.Addr()})) {
		t.Fatal("a plaintext client was let in")
	}
}
