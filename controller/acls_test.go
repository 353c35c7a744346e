package controller

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func aclTopic(principal, topic string, op kmsg.ACLOperation) acl.Binding {
	return acl.Binding{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: topic, PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: principal, Host: acl.Wildcard, Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
}

// replayACLs applies recs to img as the state machine would.
func replayACLs(t *testing.T, img *fsm.Image, recs []*keelpb.Record) *fsm.Image {
	t.Helper()
	if len(recs) == 0 {
		return img
	}
	next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestACLManager_CreateAndDelete, in AclControlManagerTest's way: the
// decisions' records replayed into an image; a bad creation or filter is
// answered on its own, the others written; nothing is written twice.
func TestACLManager_CreateAndDelete(t *testing.T) {
	img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c"}}},
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.ACLMetadataVersion}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	read, write := aclTopic("User:a", "t", kmsg.ACLOperationRead), aclTopic("User:a", "t", kmsg.ACLOperationWrite)
	bad := read
	bad.Principal = "a"
	ids := []fsm.ACLID{{1}, {2}, {3}, {4}}
	recs, errs := createACLRecords(img, []acl.Binding{read, bad, write, read}, ids)
	if len(recs) != 2 || errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "User:NAME") || errs[2] != nil || errs[3] != nil {
		t.Fatalf("records %v, errors %v", recs, errs)
	}
	img = replayACLs(t, img, recs)
	// Creating them again writes nothing.
	if recs, _ := createACLRecords(img, []acl.Binding{write}, ids[3:]); len(recs) != 0 {
		t.Fatalf("a second creation wrote %v", recs)
	}

	anyFilter := acl.Filter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	writes := anyFilter
	writes.Operation = kmsg.ACLOperationWrite
	unknown := anyFilter
	unknown.ResourceType = 0
	recs, out := deleteACLRecords(img, []acl.Filter{unknown, writes, anyFilter})
	if out[0].Err == nil || len(out[1].Deleted) != 1 || len(out[2].Deleted) != 2 || len(recs) != 2 {
		t.Fatalf("records %v, outcomes %+v", recs, out)
	}
	if img = replayACLs(t, img, recs); img.ACLCount() != 0 {
		t.Fatalf("left %v", img.ACLs())
	}
}

// TestACLManager_BelowLevel: below metadata.version 4 a creation fails whole.
func TestACLManager_BelowLevel(t *testing.T) {
	img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 3}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkACLLevel(img); err == nil || !strings.Contains(err.Error(), "ACLs need metadata.version 4; the cluster is at 3") {
		t.Fatalf("err %v", err)
	}
}
