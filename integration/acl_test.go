package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// appTLS is a Kafka client's TLS config with an application's certificate
// (keel cert create app-orders: principal User:app-orders), which no keel
// process loads, so it is read here as any Kafka client reads one.
func appTLS(t *testing.T, pki *testPKI, cn string) kgo.Opt {
	t.Helper()
	f := pki.certFiles(cn)
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: roots})
}

// aclAnswers asks broker id, as cl, to produce one record to partition 0
// of topic and to fetch from it: the two errors each broker gives (a
// broker that does not lead the partition answers NOT_LEADER_OR_FOLLOWER
// once it has authorized the client, TOPIC_AUTHORIZATION_FAILED before).
func aclAnswers(ctx context.Context, cl *kgo.Client, id int32, topic string) (produce, fetch error, err error) {
	pr, err := rawProduce(ctx, cl, id, topic, 0, poisonBatch(0, 1, poisonRecords(1)))
	if err != nil {
		return nil, nil, err
	}
	freq := kmsg.NewPtrFetchRequest()
	freq.ReplicaID, freq.MaxBytes = -1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	fresp, err := cl.Broker(int(id)).Request(ctx, freq)
	if err != nil {
		return nil, nil, err
	}
	return kerr.ErrorForCode(pr.ErrorCode),
		kerr.ErrorForCode(fresp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode), nil
}

// TestACL_ApplicationCertificate: on a TLS cluster of three controllers
// and three brokers, an application's certificate (User:app-orders) with
// no ACL is refused produce and fetch with TOPIC_AUTHORIZATION_FAILED by
// every broker; once an admin creates ACLs for it through franz-go's kadm
// it produces and consumes, and DescribeAcls lists them; once they are
// deleted every broker refuses it again within a second. Bad creations
// are refused one by one, nothing of them written; an admin certificate
// does everything throughout.
func TestACL_ApplicationCertificate(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, threeBrokers, withTLS(pki))
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3")
	c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	app := kafkaClient(t, kafka, appTLS(t, pki, "app-orders"))
	adm := kafkaAdmin(t, kafka, kafkaTLS(pki, "admin"))
	everyBroker := func(what string, within time.Duration, ok func(produce, fetch error) bool) {
		t.Helper()
		for _, id := range threeBrokers {
			var produce, fetch, err error
			werr := poll.Wait(ctx, within, 20*time.Millisecond, what, func() (bool, error) {
				produce, fetch, err = aclAnswers(ctx, app, id, topic)
				return err == nil && ok(produce, fetch), nil
			})
			if werr != nil {
				t.Fatalf("broker %d: %s: produce %v, fetch %v, request error %v", id, what, produce, fetch, err)
			}
		}
	}
	denied := func(produce, fetch error) bool {
		return errors.Is(produce, kerr.TopicAuthorizationFailed) && errors.Is(fetch, kerr.TopicAuthorizationFailed)
	}
	everyBroker("an application without ACLs is refused", time.Second, denied)

	// kadm, as an admin: ACLs for the application, and a bad one.
	grant := kadm.NewACLs().Allow("User:app-orders").AllowHosts("*").Topics(topic).
		Operations(kadm.OpWrite, kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := adm.CreateACLs(ctx, grant)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("CreateAcls %s %s: %v (%s)", r.Principal, r.Operation, r.Err, r.ErrMessage)
		}
	}
	everyBroker("an application with READ and WRITE is served", 10*time.Second, func(produce, fetch error) bool {
		return !errors.Is(produce, kerr.TopicAuthorizationFailed) && !errors.Is(fetch, kerr.TopicAuthorizationFailed)
	})
	// The application produces and consumes with franz-go as any client.
	if err := app.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("allowed")}).FirstErr(); err != nil {
		t.Fatalf("produce with ACLs: %v", err)
	}
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:app-orders").AllowHosts().Topics(topic).
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatal(err)
	}
	if len(described) != 1 || described[0].Err != nil || len(described[0].Described) != 2 {
		t.Fatalf("DescribeAcls: %+v", described)
	}
	// keel acl list, from the controllers, agrees.
	var listed []struct {
		Principal, Operation string
	}
	c.keelJSON(t, &listed, "acl", "list", "--principal", "User:app-orders")
	if len(listed) != 2 {
		t.Fatalf("keel acl list: %+v", listed)
	}

	// Bad input: each bad creation refused with INVALID_REQUEST, the
	// good one beside it written, nothing half-applied.
	bad := kmsg.NewPtrCreateACLsRequest()
	mk := func(edit func(*kmsg.CreateACLsRequestCreation)) kmsg.CreateACLsRequestCreation {
		cr := kmsg.NewCreateACLsRequestCreation()
		cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = kmsg.ACLResourceTypeTopic, "other", kmsg.ACLResourcePatternTypeLiteral
		cr.Principal, cr.Host, cr.Operation, cr.PermissionType = "User:app-orders", "*", kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeAllow
		edit(&cr)
		return cr
	}
	bad.Creations = []kmsg.CreateACLsRequestCreation{
		mk(func(cr *kmsg.CreateACLsRequestCreation) { cr.ResourceType = 42 }),
		mk(func(cr *kmsg.CreateACLsRequestCreation) { cr.Operation = 99 }),
		mk(func(cr *kmsg.CreateACLsRequestCreation) { cr.Principal = "alice" }),
		mk(func(cr *kmsg.CreateACLsRequestCreation) { cr.ResourcePatternType = kmsg.ACLResourcePatternTypeAny }),
		mk(func(*kmsg.CreateACLsRequestCreation) {}),
	}
	adminCl := kafkaClient(t, kafka, kafkaTLS(pki, "admin"))
	bresp, err := bad.RequestWith(ctx, adminCl)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"resource type UNKNOWN(42)", "operation UNKNOWN(99)", `principal "alice" is not of the form User:NAME`, "pattern type ANY", ""} {
		r := bresp.Results[i]
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		if want == "" && r.ErrorCode != 0 || want != "" && (r.ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(msg, want)) {
			t.Errorf("creation %d: %v %q; want INVALID_REQUEST containing %q", i, kerr.ErrorForCode(r.ErrorCode), msg, want)
		}
	}
	c.keelJSON(t, &listed, "acl", "list", "--principal", "User:app-orders")
	if len(listed) != 3 {
		t.Fatalf("after the bad creations, keel acl list: %+v; want the 2 ACLs and the one good creation", listed)
	}

	// The application may not change ACLs itself.
	if res, err := kadm.NewClient(app).CreateACLs(ctx, kadm.NewACLs().Allow("User:app-orders").AllowHosts("*").Clusters().Operations(kadm.OpAll)); err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("CreateAcls by the application: %+v, %v; want CLUSTER_AUTHORIZATION_FAILED", res, err)
	}

	// DeleteAcls: refused again on every broker within a second.
	dels, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow("User:app-orders").AllowHosts().Topics(topic).
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(dels) != 1 || dels[0].Err != nil || len(dels[0].Deleted) != 2 {
		t.Fatalf("DeleteAcls: %+v, %v", dels, err)
	}
	everyBroker("an application whose ACLs were deleted is refused", time.Second, denied)

	// An admin's certificate needs no ACL.
	if err := adminCl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("by an admin")}).FirstErr(); err != nil {
		t.Fatalf("produce with an admin certificate: %v", err)
	}
}
