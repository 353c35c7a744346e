package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Kafka's client quota APIs (KIP-546): DescribeClientQuotas answered from
// this broker's replayed image, as a KRaft broker answers it from its
// metadata cache; AlterClientQuotas checked here and forwarded to the
// active controller.

func (s *Server) describeClientQuotas(c *conn, r *kmsg.DescribeClientQuotasRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	fail := func(ke *kerr.Error, msg string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = ke.Code, &msg
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeCluster, "") {
		return fail(kerr.ClusterAuthorizationFailed, "describing client quotas needs DESCRIBE_CONFIGS on the cluster")
	}
	f, ke, msg := parseQuotaFilter(r)
	if ke != nil {
		return fail(ke, msg)
	}
	for _, q := range s.cfg.Image.Image().ClientQuotas() {
		if !f.matches(q.Entity) {
			continue
		}
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, d := range q.Entity.Data() {
			e.Entity = append(e.Entity, kmsg.DescribeClientQuotasResponseEntryEntity{Type: d.GetEntityType(), Name: d.EntityName})
		}
		for _, k := range slices.Sorted(maps.Keys(q.Values)) {
			e.Values = append(e.Values, kmsg.DescribeClientQuotasResponseEntryValue{Key: k, Value: q.Values[k]})
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp
}

// quotaFilter is a DescribeClientQuotas filter: per entity type, the name
// it must have (exact, or the default), or only that it is there (any).
type quotaFilter struct {
	exact  map[string]fsm.QuotaName
	any    map[string]bool
	strict bool
}

// parseQuotaFilter reads a filter with Kafka's rules
// (ClientQuotasImage.describe): each type once, a name only for an exact
// match, user and client-id only (ip: no ip quotas exist here).
func parseQuotaFilter(r *kmsg.DescribeClientQuotasRequest) (quotaFilter, *kerr.Error, string) {
	f := quotaFilter{exact: map[string]fsm.QuotaName{}, any: map[string]bool{}, strict: r.Strict}
	for _, c := range r.Components {
		typ := c.EntityType
		_, dupExact := f.exact[typ]
		switch {
		case typ == "":
			return f, kerr.InvalidRequest, "an empty entity type in the filter"
		case dupExact || f.any[typ]:
			return f, kerr.InvalidRequest, fmt.Sprintf("entity type %s cannot appear more than once in the filter", typ)
		case typ != fsm.QuotaEntityUser && typ != fsm.QuotaEntityClientID && typ != "ip":
			return f, kerr.UnsupportedVersion, fmt.Sprintf("unsupported entity type %s", fsm.Truncate(typ))
		}
		switch c.MatchType {
		case kmsg.QuotasMatchTypeExact:
			if c.Match == nil {
				return f, kerr.InvalidRequest, "an exact match needs a name to match"
			}
			f.exact[typ] = fsm.Named(*c.Match)
		case kmsg.QuotasMatchTypeDefault:
			if c.Match != nil {
				return f, kerr.InvalidRequest, "a default match takes no name"
			}
			f.exact[typ] = fsm.DefaultName
		case kmsg.QuotasMatchTypeAny:
			if c.Match != nil {
				return f, kerr.InvalidRequest, "an any match takes no name"
			}
			f.any[typ] = true
		default:
			return f, kerr.UnsupportedVersion, fmt.Sprintf("unknown match type %d", c.MatchType)
		}
	}
	_, ip := f.exact["ip"]
	if (ip || f.any["ip"]) && len(f.exact)+len(f.any) > 1 {
		return f, kerr.InvalidRequest, "an ip filter cannot be combined with user or client-id"
	}
	return f, nil, ""
}

func (f quotaFilter) matches(e fsm.QuotaEntity) bool {
	parts := map[string]fsm.QuotaName{}
	if e.User.Set {
		parts[fsm.QuotaEntityUser] = e.User
	}
	if e.ClientID.Set {
		parts[fsm.QuotaEntityClientID] = e.ClientID
	}
	if f.strict && len(parts) != len(f.exact)+len(f.any) {
		return false
	}
	for typ, want := range f.exact {
		if got, ok := parts[typ]; !ok || got != want {
			return false
		}
	}
	for typ := range f.any {
		if _, ok := parts[typ]; !ok {
			return false
		}
	}
	return true
}

func (s *Server) alterClientQuotas(ctx context.Context, c *conn, r *kmsg.AlterClientQuotasRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	resp.Entries = make([]kmsg.AlterClientQuotasResponseEntry, len(r.Entries))
	fail := func(i int, ke *kerr.Error, msg string) {
		resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = ke.Code, &msg
	}
	allowed := s.allowed(c, kmsg.ACLOperationAlterConfigs, kmsg.ACLResourceTypeCluster, "")
	req := &keelpb.AlterClientQuotasRequest{ValidateOnly: r.ValidateOnly, Principal: c.principal}
	// at maps the forwarded entries to the request's.
	var at []int
	for i, e := range r.Entries {
		out := &resp.Entries[i]
		*out = kmsg.NewAlterClientQuotasResponseEntry()
		entry := &keelpb.ClientQuotaAlteration{}
		for _, p := range e.Entity {
			out.Entity = append(out.Entity, kmsg.AlterClientQuotasResponseEntryEntity{Type: p.Type, Name: p.Name})
			entry.Entity = append(entry.Entity, &keelpb.ClientQuotaEntityData{EntityType: p.Type, EntityName: p.Name})
		}
		for _, op := range e.Ops {
			entry.Ops = append(entry.Ops, &keelpb.ClientQuotaOp{Key: op.Key, Value: op.Value, Remove: op.Remove})
		}
		if !allowed {
			fail(i, kerr.ClusterAuthorizationFailed, "altering client quotas needs ALTER_CONFIGS on the cluster")
			continue
		}
		if err := rpc.CheckClientQuotaEntry(entry); err != nil {
			fail(i, kerr.InvalidRequest, err.Error())
			continue
		}
		req.Entries = append(req.Entries, entry)
		at = append(at, i)
	}
	if len(req.Entries) == 0 {
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, defaultAdminTimeout)
	defer cancel()
	done, err := s.cfg.Controller.AlterClientQuotas(ctx, req)
	if err == nil && len(done.GetResults()) != len(req.Entries) {
		err = errors.New("the controller answered for another number of entries")
	}
	for k, i := range at {
		switch {
		case err != nil:
			ke, msg := quotaError(err)
			fail(i, ke, msg)
		case done.GetResults()[k].GetError() != "":
			fail(i, kerr.InvalidRequest, done.GetResults()[k].GetError())
		}
	}
	if err == nil && !r.ValidateOnly {
		// The client's next describe, here, finds what it set.
		s.awaitOffset(ctx, done.GetOffset())
	}
	return resp
}

// quotaError is the Kafka error of a refused AlterClientQuotas.
func quotaError(err error) (*kerr.Error, string) {
	ke, msg := adminError(err)
	if ke == kerr.InvalidTopicException || ke == kerr.UnknownTopicOrPartition {
		ke = kerr.InvalidRequest
	}
	return ke, msg
}
