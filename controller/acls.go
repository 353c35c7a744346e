package controller

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ACL changes, after KRaft's AclControlManager: a request becomes records
// decided against the committed image, each creation or filter answered on
// its own, the valid ones written in one batch.

// CreateACLs writes the valid bindings among creations and returns, per
// creation, why it was refused (nil: created, or it existed already). It
// fails whole (ErrUnsupportedMetadataVersion) below metadata.version 4, or
// as a write fails.
func (c *Controller) CreateACLs(ctx context.Context, creations []acl.Binding) ([]error, error) {
	ids := make([]fsm.ACLID, len(creations))
	for i := range ids {
		ids[i] = fsm.ACLID(uuid.New())
	}
	var errs []error
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		recs, errs = createACLRecords(img, creations, ids)
		if err := checkACLLevel(img); err != nil && len(recs) > 0 {
			return nil, err
		}
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	for i, b := range creations {
		if errs[i] == nil {
			c.log.Info("acl created", "acl", b.String())
		}
	}
	return errs, nil
}

// checkACLLevel refuses ACL records below the level that introduced them.
func checkACLLevel(img *fsm.Image) error {
	if have := img.FinalizedMetadataVersion(); have < fsm.ACLMetadataVersion {
		return fmt.Errorf("%w: ACLs need %s %d; the cluster is at %d (keel features upgrade)",
			ErrUnsupportedMetadataVersion, fsm.MetadataVersionFeature, fsm.ACLMetadataVersion, have)
	}
	return nil
}

// createACLRecords decides one record per valid creation that img (and the
// request before it) does not hold yet, with ids[i] for creation i; errs[i]
// says why creation i was refused.
func createACLRecords(img *fsm.Image, creations []acl.Binding, ids []fsm.ACLID) (recs []*keelpb.Record, errs []error) {
	errs = make([]error, len(creations))
	seen := map[acl.Binding]bool{}
	for i, b := range creations {
		if err := b.Validate(); err != nil {
			errs[i] = err
			continue
		}
		if seen[b] || img.HasACL(b) {
			continue
		}
		seen[b] = true
		recs = append(recs, fsm.ACLRecord(ids[i], b))
	}
	return recs, errs
}

// ACLDeletion is one DeleteAcls filter's outcome: the ACLs it removed, or
// why it was refused.
type ACLDeletion struct {
	Deleted []acl.Binding
	Err     error
}

// DeleteACLs removes every ACL each valid filter matches, in one batch,
// and answers per filter.
func (c *Controller) DeleteACLs(ctx context.Context, filters []acl.Filter) ([]ACLDeletion, error) {
	var out []ACLDeletion
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		recs, out = deleteACLRecords(img, filters)
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range out {
		for _, b := range d.Deleted {
			c.log.Info("acl deleted", "acl", b.String())
		}
	}
	return out, nil
}

// deleteACLRecords decides a RemoveAccessControlEntryRecord for every ACL a
// valid filter matches (once, when several match it).
func deleteACLRecords(img *fsm.Image, filters []acl.Filter) ([]*keelpb.Record, []ACLDeletion) {
	out := make([]ACLDeletion, len(filters))
	var recs []*keelpb.Record
	removed := map[fsm.ACLID]bool{}
	all := img.ACLs()
	for i, f := range filters {
		if err := f.Validate(); err != nil {
			out[i].Err = err
			continue
		}
		for _, a := range all {
			if !f.Matches(a.Binding) {
				continue
			}
			out[i].Deleted = append(out[i].Deleted, a.Binding)
			if !removed[a.ID] {
				removed[a.ID] = true
				recs = append(recs, &keelpb.Record{Record: &keelpb.Record_RemoveAcl{RemoveAcl: &keelpb.RemoveAccessControlEntryRecord{Id: append([]byte(nil), a.ID[:]...)}}})
			}
		}
	}
	return recs, out
}

// DescribeACLs answers the ACLs filter matches, from the confirmed image.
func (c *Controller) DescribeACLs(ctx context.Context, filter acl.Filter) ([]acl.Binding, error) {
	if err := filter.Validate(); err != nil {
		return nil, fieldError("filter", "%v", err)
	}
	img, err := c.ReadImage(ctx)
	if err != nil {
		return nil, err
	}
	return img.MatchingACLs(filter), nil
}
