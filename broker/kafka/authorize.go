package kafka

import (
	"context"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/tlsauth"
)

// MetricAuthorizations counts the listener's authorization decisions.
const MetricAuthorizations = "keel_kafka_authorizations_total"

// allowed says whether the client on c may do op to the resource of type
// typ named name, in Kafka's terms (its ACL operations and resource types),
// as Kafka's Authorizer.authorize does for every request: each handler asks
// it for each resource it touches before doing any work, and answers a
// refusal with the authorization error Kafka gives for that resource
// (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
// CLUSTER_AUTHORIZATION_FAILED, ...).
//
// A super user (conn.super) may do everything; anyone else what the ACLs
// of the broker's replayed image allow (acl.Set.Authorize: no ACL means
// denied), as Kafka's StandardAuthorizer decides. Every decision is
// counted, and logged at debug but a super user's, which identify logs once
// per connection: a super user's request for thousands of topics would
// cost a log line each.
func (s *Server) allowed(c *conn, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	ok := c.super || s.cfg.Image.Image().ACLSet().Authorize(c.principal, c.host, op, typ, name)
	s.decided(c, op, typ, name, ok)
	return ok
}

// allowedAny says whether the client on c may do op to some resource of
// type typ (Kafka's authorizeByResourceType).
func (s *Server) allowedAny(c *conn, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	ok := c.super || s.cfg.Image.Image().ACLSet().AuthorizeAny(c.principal, c.host, op, typ)
	s.decided(c, op, typ, "", ok)
	return ok
}

func (s *Server) decided(c *conn, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string, ok bool) {
	decision := "denied"
	if ok {
		decision = "allowed"
	}
	if !c.super && s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("authorization", "principal", c.principal, "host", c.host, "operation", op.String(),
			"resource_type", typ.String(), "resource", name, "decision", decision, "super_user", c.super)
	}
	if s.authz != nil {
		s.authz.WithLabelValues(op.String(), typ.String(), decision).Inc()
	}
}

// newAuthzMetrics registers the decisions' counter; nil without a
// registry.
func newAuthzMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	if reg == nil {
		return nil, nil
	}
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricAuthorizations,
		Help: "Authorization decisions on the Kafka listener, by ACL operation, resource type and decision (allowed, denied): Kafka's authorizer metrics.",
	}, []string{"operation", "resource_type", "decision"})
	return m, reg.Register(m)
}

// identify sets who the client on c is (design: principals in Kafka's
// form): a certificate's holder is User:<common name>, a super user if
// the certificate names a keel role (an operator, a broker, a
// controller); an application's certificate (tlsauth.RoleUser) is
// authorized by ACLs. Without TLS the client is User:ANONYMOUS, a super
// user unless SASL is required: plaintext is Keel's explicit trust in
// whoever reaches the port.
// Configured super users (Config.SuperUsers) are super users too.
func (s *Server) identify(c *conn, id *tlsauth.Identity) {
	if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		c.host = host
	}
	if id == nil {
		// A listener that requires SASL gives an anonymous client no
		// rights (and serves it nothing but the SASL requests until its
		// login names it: saslGate).
		c.principal, c.super = acl.Anonymous, s.cfg.SASL != SASLRequired
	} else {
		c.principal = "User:" + id.Name
		c.super = id.Role == tlsauth.RoleAdmin || id.Role == tlsauth.RoleBroker || id.Role == tlsauth.RoleController
	}
	if acl.IsSuper(c.principal, s.cfg.SuperUsers) {
		c.super = true
	}
	s.log.Debug("kafka client identified", "principal", c.principal, "host", c.host, "super_user", c.super)
}
