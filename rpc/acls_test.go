package rpc

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestAuthorizeForwardedByACL: what each forwarded request asks of the
// controller's ACLs, as Kafka's ControllerApis asks it.
func TestAuthorizeForwardedByACL(t *testing.T) {
	allowTopic := func(op kmsg.ACLOperation) *acl.Set {
		return acl.NewSet([]acl.Binding{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders", PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:app", Host: acl.Wildcard, Operation: op, Permission: kmsg.ACLPermissionTypeAllow}})
	}
	allowCluster := func(op kmsg.ACLOperation) *acl.Set {
		return acl.NewSet([]acl.Binding{{ResourceType: kmsg.ACLResourceTypeCluster, ResourceName: acl.ClusterName, PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:app", Host: acl.Wildcard, Operation: op, Permission: kmsg.ACLPermissionTypeAllow}})
	}
	for _, tc := range []struct {
		name string
		set  *acl.Set
		req  proto.Message
		want bool
	}{
		{"create, topic CREATE", allowTopic(kmsg.ACLOperationCreate), &keelpb.CreateTopicRequest{Name: "orders", Principal: "User:app"}, true},
		{"create, cluster CREATE", allowCluster(kmsg.ACLOperationCreate), &keelpb.CreateTopicRequest{Name: "orders", Principal: "User:app"}, true},
		{"create another topic", allowTopic(kmsg.ACLOperationCreate), &keelpb.CreateTopicRequest{Name: "other", Principal: "User:app"}, false},
		{"create, WRITE only", allowTopic(kmsg.ACLOperationWrite), &keelpb.CreateTopicRequest{Name: "orders", Principal: "User:app"}, false},
		{"create for another principal", allowTopic(kmsg.ACLOperationCreate), &keelpb.CreateTopicRequest{Name: "orders", Principal: "User:bob"}, false},
		{"delete, DELETE", allowTopic(kmsg.ACLOperationDelete), &keelpb.DeleteTopicRequest{Name: "orders", Principal: "User:app"}, true},
		{"delete, CREATE only", allowTopic(kmsg.ACLOperationCreate), &keelpb.DeleteTopicRequest{Name: "orders", Principal: "User:app"}, false},
		{"add partitions, ALTER", allowTopic(kmsg.ACLOperationAlter), &keelpb.CreatePartitionsRequest{Topic: "orders", Principal: "User:app"}, true},
		{"create acls, cluster ALTER", allowCluster(kmsg.ACLOperationAlter), &keelpb.CreateAclsRequest{Principal: "User:app"}, true},
		{"delete acls, cluster DESCRIBE only", allowCluster(kmsg.ACLOperationDescribe), &keelpb.DeleteAclsRequest{Principal: "User:app"}, false},
		{"no ACLs", nil, &keelpb.CreateTopicRequest{Name: "orders", Principal: "User:app"}, false},
		{"a request forwarded for nobody", allowCluster(kmsg.ACLOperationAll), &keelpb.DeleteAclsRequest{}, false},
		{"elect leaders forwarded for nobody", allowCluster(kmsg.ACLOperationAll), &keelpb.ElectLeadersRequest{}, false},
		{"elect leaders, cluster ALTER", allowCluster(kmsg.ACLOperationAlter), &keelpb.ElectLeadersRequest{Principal: "User:app"}, true},
		{"reassign, cluster ALTER", allowCluster(kmsg.ACLOperationAlter), &keelpb.AlterPartitionReassignmentsRequest{Principal: "User:app"}, true},
		{"update features, cluster DESCRIBE only", allowCluster(kmsg.ACLOperationDescribe), &keelpb.UpdateFeaturesRequest{Principal: "User:app"}, false},
		{"scram credentials, cluster ALTER", allowCluster(kmsg.ACLOperationAlter), &keelpb.AlterUserScramCredentialsRequest{Principal: "User:app"}, true},
		{"topic configs, topic ALTER_CONFIGS", allowTopic(kmsg.ACLOperationAlterConfigs), &keelpb.IncrementalAlterConfigsRequest{Principal: "User:app",
			Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: "orders"}}, true},
		{"cluster configs, topic ALTER_CONFIGS only", allowTopic(kmsg.ACLOperationAlterConfigs), &keelpb.IncrementalAlterConfigsRequest{Principal: "User:app",
			Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}}, false},
		{"client quotas, cluster ALTER_CONFIGS", allowCluster(kmsg.ACLOperationAlterConfigs), &keelpb.AlterClientQuotasRequest{Principal: "User:app"}, true},
		{"not a forwarded request", allowCluster(kmsg.ACLOperationAll), &keelpb.AppendNoOpRequest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decide := func(p string, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
				return tc.set.Authorize(p, "", op, typ, name)
			}
			if got := authorizeForwardedByACL(decide, tc.req); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
