package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// grantTopic gives principal the operations (keel acl's names: READ,
// WRITE, ...) on topic with `keel acl add`, as an operator grants an
// application, and waits until every broker of kafka lists the new ACLs,
// asked as admin (opts: the admin's TLS): an authorization decision on any
// broker sees them from then on.
func grantTopic(t *testing.T, c *Cluster, kafka map[int32]string, principal, topic string, ops []string, opts ...kgo.Opt) {
	t.Helper()
	args := []string{"acl", "add", "--principal", principal, "--allow", "--topic", topic}
	for _, op := range ops {
		args = append(args, "--operation", op)
	}
	if stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs(args...)...); code != 0 {
		t.Fatalf("keel acl add: exit %d\n%s%s", code, stdout, stderr)
	}
	cl := kafkaClient(t, kafka, opts...)
	for id := range kafka {
		poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d lists %s's ACLs on %s", id, principal, topic), func() (bool, string) {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.ACLResourcePatternTypeLiteral
			req.ResourceName, req.Principal = &topic, &principal
			req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			resp, err := cl.Broker(int(id)).Request(context.Background(), req)
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for _, r := range resp.(*kmsg.DescribeACLsResponse).Resources {
				n += len(r.ACLs)
			}
			return n >= len(ops), fmt.Sprintf("%d ACLs", n)
		})
	}
}
