package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// allowed says whether the client on c may do op to the resource of type
// typ named name, in Kafka's terms (its ACL operations and resource types),
// as Kafka's Authorizer.authorize does for every request: each handler asks
// it for each resource it touches before doing any work, and answers a
// refusal with the authorization error Kafka gives for that resource
// (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
// CLUSTER_AUTHORIZATION_FAILED, ...).
//
// The rule today is coarse: an admin (plaintext, or an admin certificate)
// may do everything; any other client may read, write and describe topics,
// describe the cluster and write idempotently.
func (s *Server) allowed(c *conn, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	_ = name
	if c.admin {
		return true
	}
	switch typ {
	case kmsg.ACLResourceTypeTopic:
		return op == kmsg.ACLOperationRead || op == kmsg.ACLOperationWrite || op == kmsg.ACLOperationDescribe
	case kmsg.ACLResourceTypeCluster:
		return op == kmsg.ACLOperationDescribe || op == kmsg.ACLOperationIdempotentWrite
	}
	return false
}
