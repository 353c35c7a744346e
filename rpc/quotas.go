package rpc

import (
	"fmt"
	"slices"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// maxQuotaEntries bounds the entries of one AlterClientQuotas request.
const maxQuotaEntries = 1000

// checkAlterClientQuotas checks an AlterClientQuotas request: between one
// and maxQuotaEntries entries, each good by CheckClientQuotaEntry.
func checkAlterClientQuotas(r *keelpb.AlterClientQuotasRequest) error {
	es := r.GetEntries()
	if len(es) == 0 || len(es) > maxQuotaEntries {
		return invalidArgument("entries", "%d entries; want 1..%d", len(es), maxQuotaEntries)
	}
	for i, e := range es {
		if err := CheckClientQuotaEntry(e); err != nil {
			return invalidArgument(fmt.Sprintf("entries[%d]", i), "%v", err)
		}
	}
	return validPrincipal(r.GetPrincipal())
}

// CheckClientQuotaEntry checks one entity's alteration by Kafka's rules
// (fsm.ParseQuotaEntity, fsm.CheckClientQuota): a good entity, at most
// maxConfigs operations (none is a change of nothing, as in Kafka), each
// key once, a removed key a known one. A
// broker checks each entry of a Kafka AlterClientQuotas with it, to answer
// a bad one alone. The error names no request field.
func CheckClientQuotaEntry(e *keelpb.ClientQuotaAlteration) error {
	for _, p := range e.GetEntity() {
		if len(p.GetEntityName()) > maxPrincipalLen {
			return fmt.Errorf("the %s name is longer than %d bytes", p.GetEntityType(), maxPrincipalLen)
		}
	}
	if _, err := fsm.ParseQuotaEntity(e.GetEntity()); err != nil {
		return err
	}
	ops := e.GetOps()
	if len(ops) > maxConfigs {
		return fmt.Errorf("%d quota operations; want at most %d", len(ops), maxConfigs)
	}
	for i, op := range ops {
		if slices.ContainsFunc(ops[:i], func(o *keelpb.ClientQuotaOp) bool { return o.GetKey() == op.GetKey() }) {
			return fmt.Errorf("the quota key %s is named twice", op.GetKey())
		}
		value := op.GetValue()
		if op.GetRemove() {
			value = 1 // any value the key takes: only the key is checked
		}
		if err := fsm.CheckClientQuota(op.GetKey(), value); err != nil {
			return err
		}
	}
	return nil
}
