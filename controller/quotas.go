package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The client quota manager: a pure function from the committed image and
// an AlterClientQuotas request to records (Kafka's
// ClientQuotaControlManager.alterClientQuotas). Each entry is decided
// whole: one with a bad entity, key or value, or naming an entity another
// entry names too, gets its error and writes nothing; the others' records
// go in one batch. A value the entity already has writes nothing.

// clientQuotaRecords decides req on img: the records, and one error
// message per entry ("" for an entry that is good).
func clientQuotaRecords(img *fsm.Image, req *keelpb.AlterClientQuotasRequest) ([]*keelpb.Record, []string) {
	errs := make([]string, len(req.GetEntries()))
	if have := img.FinalizedMetadataVersion(); have < fsm.ClientQuotaMetadataVersion {
		for i := range errs {
			errs[i] = fmt.Sprintf("client quotas need %s %d; the cluster is at %d (keel features upgrade)",
				fsm.MetadataVersionFeature, fsm.ClientQuotaMetadataVersion, have)
		}
		return nil, errs
	}
	entities := make([]fsm.QuotaEntity, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		entity, err := fsm.ParseQuotaEntity(e.GetEntity())
		if err != nil {
			errs[i] = err.Error()
			continue
		}
		entities[i] = entity
		// An entry that failed to parse left the zero entity, which no
		// parsed one equals.
		if j := slices.Index(entities[:i], entity); j >= 0 {
			// Kafka ignores an entity named twice; neither entry is
			// written, so that nothing depends on their order.
			msg := fmt.Sprintf("the entity %s is named by more than one entry", entity)
			errs[i], errs[j] = msg, msg
		}
	}
	var recs []*keelpb.Record
	for i, e := range req.GetEntries() {
		if errs[i] != "" {
			continue
		}
		var mine []*keelpb.Record
		for k, op := range e.GetOps() {
			if slices.ContainsFunc(e.GetOps()[:k], func(o *keelpb.ClientQuotaOp) bool { return o.GetKey() == op.GetKey() }) {
				errs[i] = fmt.Sprintf("the quota key %s is named twice", op.GetKey())
				break
			}
			old, had := img.ClientQuota(entities[i], op.GetKey())
			rec := &keelpb.ClientQuotaRecord{Entity: entities[i].Data(), Key: op.GetKey()}
			if op.GetRemove() {
				if !slices.Contains(fsm.QuotaKeys, op.GetKey()) {
					errs[i] = fsm.CheckClientQuota(op.GetKey(), 1).Error()
					break
				}
				if !had {
					continue
				}
				rec.Remove = true
			} else {
				if err := fsm.CheckClientQuota(op.GetKey(), op.GetValue()); err != nil {
					errs[i] = err.Error()
					break
				}
				if had && old == op.GetValue() {
					continue
				}
				rec.Value = op.GetValue()
			}
			mine = append(mine, &keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: rec}})
		}
		if errs[i] == "" {
			recs = append(recs, mine...)
		}
	}
	return recs, errs
}

// AlterClientQuotas sets and removes client quotas, each entry whole (see
// clientQuotaRecords), and returns one error message per entry, "" where
// the entry is (or, validate only, would be) applied. With validate_only
// it decides on the active controller's confirmed image (ReadImage) and
// writes nothing. It also returns the offset the records were written at
// (0: none were). Errors: decide's and ReadImage's, for the whole request.
func (c *Controller) AlterClientQuotas(ctx context.Context, req *keelpb.AlterClientQuotasRequest) ([]string, uint64, error) {
	if req.GetValidateOnly() {
		img, err := c.ReadImage(ctx)
		if err != nil {
			return nil, 0, err
		}
		_, errs := clientQuotaRecords(img, req)
		return errs, 0, nil
	}
	var errs []string
	var written int
	index, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		recs, e := clientQuotaRecords(img, req)
		errs, written = e, len(recs)
		return recs, nil
	})
	if err != nil {
		return nil, 0, err
	}
	if written == 0 {
		return errs, 0, nil
	}
	c.log.Info("client quotas altered", "principal", req.GetPrincipal(), "entries", len(req.GetEntries()), "records", written)
	return errs, index, nil
}
