package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/tlsauth"
)

// userTLS is a Kafka client's TLS config with an application's certificate
// (tlsauth.RoleUser), which tlsauth.Config does not load.
func userTLS(t *testing.T, ca *tlsauth.CA, cn string) *tls.Config {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(cn, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: roots}
}

// TestServer_ACLs: an application's certificate is authorized by the
// image's ACLs on every request (StandardAuthorizer's default: no ACL, no
// access), the ACL APIs change and list them through the controller, a
// super user (an admin's certificate, or --kafka-super-users) does
// everything, and bad creations are refused one by one.
func TestServer_ACLs(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka acl test CA")
	if err != nil {
		t.Fatal(err)
	}
	brokerCert, err := ca.Config("broker-1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	adminCert, err := ca.Config("admin", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, backend, func(c *Config) {
		c.TLS = brokerCert
		c.Metrics = reg
		c.SuperUsers = []string{"User:ops"}
	})
	meta.createTopic("orders", []int32{1})
	meta.createTopic("secret", []int32{1})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	app := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app-orders")), kgo.RequestRetries(0))
	admin := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(adminCert.Client(tlsauth.RoleBroker)))
	ops := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "ops")))

	produce := func(cl *kgo.Client, topic string) int16 {
		t.Helper()
		return produceRaw(t, cl, 1, topic, 0, []byte("v")).Topics[0].Partitions[0].ErrorCode
	}
	fetch := func(cl *kgo.Client, topic string) int16 {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = 12, -1, 0, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	metadataTopics := func(cl *kgo.Client) map[string]int16 {
		t.Helper()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int16{}
		for _, mt := range resp.Topics {
			out[*mt.Topic] = mt.ErrorCode
		}
		return out
	}
	denied := kerr.TopicAuthorizationFailed.Code

	// No ACL: nothing, and the decision is counted.
	if code := produce(app, "orders"); code != denied {
		t.Fatalf("produce without an ACL: %v", kerr.ErrorForCode(code))
	}
	if n := authorizations(t, reg)["WRITE/TOPIC/denied"]; n != 1 {
		t.Fatalf("%s: %v WRITE/TOPIC/denied after one refused produce, want 1 (%v)", MetricAuthorizations, n, authorizations(t, reg))
	}
	if code := fetch(app, "orders"); code != denied {
		t.Fatalf("fetch without an ACL: %v", kerr.ErrorForCode(code))
	}
	if got := metadataTopics(app); len(got) != 0 {
		t.Fatalf("metadata of every topic without an ACL: %v", got)
	}

	// An application may not change ACLs; an admin may.
	create := func(cl *kgo.Client, creations ...kmsg.CreateACLsRequestCreation) []kmsg.CreateACLsResponseResult {
		t.Helper()
		req := kmsg.NewPtrCreateACLsRequest()
		req.Creations = creations
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Results
	}
	creation := func(principal, topic string, pattern kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kmsg.CreateACLsRequestCreation {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, topic, pattern
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", op, kmsg.ACLPermissionTypeAllow
		return c
	}
	write := creation("User:app-orders", "orders", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationWrite)
	read := creation("User:app-orders", "ord", kmsg.ACLResourcePatternTypePrefixed, kmsg.ACLOperationRead)
	if res := create(app, write); res[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("CreateAcls by an application: %+v", res)
	}
	// Bad creations are refused one by one, the good one in between
	// written.
	unknownType := write
	unknownType.ResourceType = 42
	noUser := write
	noUser.Principal = "alice"
	anyPattern := write
	anyPattern.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
	badOp := write
	badOp.Operation = kmsg.ACLOperationAny
	res := create(admin, unknownType, write, noUser, read, anyPattern, badOp)
	for i, want := range []int16{kerr.InvalidRequest.Code, 0, kerr.InvalidRequest.Code, 0, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code} {
		if res[i].ErrorCode != want {
			t.Errorf("creation %d: %v (%v), want %v", i, kerr.ErrorForCode(res[i].ErrorCode), *res[i].ErrorMessage, kerr.ErrorForCode(want))
		}
	}
	if n := meta.Image().ACLCount(); n != 2 {
		t.Fatalf("%d ACLs after the creations, want 2: %v", n, meta.Image().ACLs())
	}
	if code := produce(app, "orders"); code != 0 {
		t.Fatalf("produce with WRITE: %v", kerr.ErrorForCode(code))
	}
	if code := fetch(app, "orders"); code != 0 {
		t.Fatalf("fetch with READ on the prefix: %v", kerr.ErrorForCode(code))
	}
	if code := produce(app, "secret"); code != denied {
		t.Fatalf("produce to another topic: %v", kerr.ErrorForCode(code))
	}
	// READ and WRITE imply DESCRIBE: the topic, and only it, is listed.
	if got := metadataTopics(app); len(got) != 1 || got["orders"] != 0 {
		t.Fatalf("metadata of every topic: %v", got)
	}

	// DescribeAcls lists them, grouped by resource.
	dreq := kmsg.NewPtrDescribeACLsRequest()
	dreq.ResourceType, dreq.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	dreq.Operation, dreq.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	dresp, err := dreq.RequestWith(ctx, admin)
	if err != nil || dresp.ErrorCode != 0 || len(dresp.Resources) != 2 {
		t.Fatalf("DescribeAcls: %+v, %v", dresp, err)
	}
	if dresp, err := dreq.RequestWith(ctx, app); err != nil || dresp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("DescribeAcls by an application: %+v, %v", dresp, err)
	}

	// DeleteAcls removes the write: refused again.
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.ACLResourcePatternTypeMatch
	name := "orders"
	f.ResourceName = &name
	f.Operation, f.PermissionType = kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAny
	bad := f
	bad.Operation = 77
	del.Filters = []kmsg.DeleteACLsRequestFilter{bad, f}
	delResp, err := del.RequestWith(ctx, admin)
	if err != nil || delResp.Results[0].ErrorCode != kerr.InvalidRequest.Code || delResp.Results[1].ErrorCode != 0 || len(delResp.Results[1].MatchingACLs) != 1 {
		t.Fatalf("DeleteAcls: %+v, %v", delResp, err)
	}
	if code := produce(app, "orders"); code != denied {
		t.Fatalf("produce after DeleteAcls: %v", kerr.ErrorForCode(code))
	}
	if code := fetch(app, "orders"); code != 0 {
		t.Fatalf("fetch after deleting the write only: %v", kerr.ErrorForCode(code))
	}

	// A configured super user needs no ACL.
	if code := produce(ops, "secret"); code != 0 {
		t.Fatalf("produce by a super user: %v", kerr.ErrorForCode(code))
	}
	// Every ACL change was forwarded in the client's name.
	for _, p := range meta.forwardedPrincipals() {
		if p != "User:admin" {
			t.Fatalf("principals forwarded: %q", meta.forwardedPrincipals())
		}
	}
}

// authorizations is MetricAuthorizations in reg, by operation/type/decision.
func authorizations(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counters(t, reg, MetricAuthorizations, "operation", "resource_type", "decision")
}

// counters is the counter name in reg, by the values of labels joined
// with "/".
func counters(t *testing.T, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			key := make([]string, len(labels))
			for i, l := range labels {
				key[i] = have[l]
			}
			out[strings.Join(key, "/")] = m.GetCounter().GetValue()
		}
	}
	return out
}
