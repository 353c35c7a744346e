package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ACLMetadataVersion is the level that introduced ACL records.
const ACLMetadataVersion uint32 = 4

// ACLID names one ACL: 16 bytes the active controller chose (KRaft's Uuid).
type ACLID [16]byte

// ACL is one ACL binding and its id.
type ACL struct {
	ID ACLID
	acl.Binding
}

// aclState is the image's ACLs. Never modified once published: a batch
// that changes them makes a new one (applyContext.mutACLs). The indexed
// set the authorizer decides with is built once, on first use.
type aclState struct {
	byID map[ACLID]acl.Binding
	once sync.Once
	set  *acl.Set
}

// ACLSet is the image's ACLs, indexed for acl.Set.Authorize. Empty (deny
// all) before any ACL.
func (img *Image) ACLSet() *acl.Set {
	s := img.acls
	if s == nil {
		return nil
	}
	s.once.Do(func() { s.set = acl.NewSet(slices.Collect(maps.Values(s.byID))) })
	return s.set
}

// ACLCount is the number of ACLs.
func (img *Image) ACLCount() int {
	if img.acls == nil {
		return 0
	}
	return len(img.acls.byID)
}

// ACLs returns every ACL, in id order.
func (img *Image) ACLs() []ACL {
	if img.acls == nil {
		return nil
	}
	out := make([]ACL, 0, len(img.acls.byID))
	for _, id := range slices.SortedFunc(maps.Keys(img.acls.byID), func(a, b ACLID) int { return bytes.Compare(a[:], b[:]) }) {
		out = append(out, ACL{ID: id, Binding: img.acls.byID[id]})
	}
	return out
}

// HasACL says whether an ACL equal to b exists.
func (img *Image) HasACL(b acl.Binding) bool {
	if img.acls == nil {
		return false
	}
	for _, have := range img.acls.byID {
		if have == b {
			return true
		}
	}
	return false
}

// MatchingACLs lists the ACLs filter matches, in id order.
func (img *Image) MatchingACLs(filter acl.Filter) []acl.Binding {
	var out []acl.Binding
	for _, a := range img.ACLs() {
		if filter.Matches(a.Binding) {
			out = append(out, a.Binding)
		}
	}
	return out
}

// mutACLs returns img's ACLs for this batch to edit, copied first if the
// batch does not own them yet.
func (ctx *applyContext) mutACLs(img *Image) map[ACLID]acl.Binding {
	if !ctx.aclsOwned {
		next := &aclState{byID: map[ACLID]acl.Binding{}}
		if img.acls != nil {
			maps.Copy(next.byID, img.acls.byID)
		}
		img.acls = next
		ctx.aclsOwned = true
	}
	return img.acls.byID
}

// BindingOf reads the binding an AccessControlEntryRecord states, unchecked.
func BindingOf(r *keelpb.AccessControlEntryRecord) acl.Binding {
	return acl.Binding{
		ResourceType: kmsg.ACLResourceType(r.GetResourceType()),
		ResourceName: r.GetResourceName(),
		PatternType:  kmsg.ACLResourcePatternType(r.GetPatternType()),
		Principal:    r.GetPrincipal(),
		Host:         r.GetHost(),
		Operation:    kmsg.ACLOperation(r.GetOperation()),
		Permission:   kmsg.ACLPermissionType(r.GetPermissionType()),
	}
}

// ACLRecord states a (id, binding) as an AccessControlEntryRecord.
func ACLRecord(id ACLID, b acl.Binding) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Acl{Acl: &keelpb.AccessControlEntryRecord{
		Id: bytes.Clone(id[:]), ResourceType: int32(b.ResourceType), ResourceName: b.ResourceName,
		PatternType: int32(b.PatternType), Principal: b.Principal, Host: b.Host,
		Operation: int32(b.Operation), PermissionType: int32(b.Permission),
	}}}
}

func aclID(b []byte) (ACLID, error) {
	var id ACLID
	if len(b) != len(id) {
		return id, fmt.Errorf("id is %d bytes, want %d", len(b), len(id))
	}
	copy(id[:], b)
	if id == (ACLID{}) {
		return id, fmt.Errorf("id is zero")
	}
	return id, nil
}

// applyACL adds one ACL. A record whose enums are out of range, or whose
// binding Keel could not decide with, is refused whole, as is a second ACL
// with the same id or the same binding (the controller writes neither).
func applyACL(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetAcl()
	id, err := aclID(r.GetId())
	if err != nil {
		return err
	}
	for _, v := range []int32{r.GetResourceType(), r.GetPatternType(), r.GetOperation(), r.GetPermissionType()} {
		if v < -128 || v > 127 {
			return fmt.Errorf("enum value %d is out of range", v)
		}
	}
	b := BindingOf(r)
	if err := b.Validate(); err != nil {
		return err
	}
	if img.acls != nil {
		if _, ok := img.acls.byID[id]; ok {
			return fmt.Errorf("acl %x exists", id)
		}
		if img.HasACL(b) {
			return fmt.Errorf("acl %v exists", b)
		}
	}
	ctx.mutACLs(img)[id] = b
	return nil
}

// applyRemoveACL removes one ACL, which must exist.
func applyRemoveACL(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	id, err := aclID(rec.GetRemoveAcl().GetId())
	if err != nil {
		return err
	}
	if img.acls == nil {
		return fmt.Errorf("no acl %x", id)
	}
	if _, ok := img.acls.byID[id]; !ok {
		return fmt.Errorf("no acl %x", id)
	}
	delete(ctx.mutACLs(img), id)
	return nil
}

// aclRecords lists the ACLs as records, by id.
func aclRecords(img *Image, emit func(*keelpb.Record) error) error {
	for _, a := range img.ACLs() {
		if err := emit(ACLRecord(a.ID, a.Binding)); err != nil {
			return err
		}
	}
	return nil
}
