package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
)

func aclBinding(principal, topic string, op kmsg.ACLOperation) acl.Binding {
	return acl.Binding{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: topic, PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: principal, Host: acl.Wildcard, Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
}

func removeACL(id ACLID) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_RemoveAcl{RemoveAcl: &keelpb.RemoveAccessControlEntryRecord{Id: id[:]}}}
}

// TestFSM_ACLs applies ACL records, KRaft's AclControlManagerTest way: each
// valid record is in the image and decides; each invalid one is refused
// with its batch whole.
func TestFSM_ACLs(t *testing.T) {
	id1, id2 := ACLID{1}, ACLID{2}
	read := aclBinding("User:alice", "orders", kmsg.ACLOperationRead)
	write := aclBinding("User:bob", "orders", kmsg.ACLOperationWrite)
	base := []*keelpb.RecordBatch{batch(clusterID("c"), featureLevel(ACLMetadataVersion), epoch(1, 1))}
	tests := []struct {
		name    string
		log     []*keelpb.RecordBatch
		batch   *keelpb.RecordBatch
		errText string
		check   func(t *testing.T, img *Image)
	}{
		{
			name: "add two", log: base, batch: batch(ACLRecord(id1, read), ACLRecord(id2, write)),
			check: func(t *testing.T, img *Image) {
				s := img.ACLSet()
				if img.ACLCount() != 2 || !s.Authorize("User:alice", "h", kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, "orders") ||
					s.Authorize("User:alice", "h", kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, "orders") {
					t.Fatalf("acls %v", img.ACLs())
				}
			},
		},
		{
			name: "remove one", log: append(base, batch(ACLRecord(id1, read), ACLRecord(id2, write))), batch: batch(removeACL(id1)),
			check: func(t *testing.T, img *Image) {
				if img.ACLCount() != 1 || img.ACLSet().Authorize("User:alice", "h", kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, "orders") {
					t.Fatalf("acls %v", img.ACLs())
				}
			},
		},
		{name: "below metadata.version 4", log: []*keelpb.RecordBatch{batch(clusterID("c"), featureLevel(3), epoch(1, 1))},
			batch: batch(ACLRecord(id1, read)), errText: "acl record needs metadata.version 4; the cluster is at 3"},
		{name: "same id twice", log: base, batch: batch(ACLRecord(id1, read), ACLRecord(id1, write)), errText: "exists"},
		{name: "same binding twice", log: base, batch: batch(ACLRecord(id1, read), ACLRecord(id2, read)), errText: "exists"},
		{name: "a zero id", log: base, batch: batch(ACLRecord(ACLID{}, read)), errText: "id is zero"},
		{name: "a short id", log: base, batch: batch(&keelpb.Record{Record: &keelpb.Record_Acl{Acl: &keelpb.AccessControlEntryRecord{Id: []byte{1}}}}), errText: "id is 1 bytes"},
		{name: "a malformed principal", log: base, batch: batch(ACLRecord(id1, aclBinding("alice", "t", kmsg.ACLOperationRead))), errText: "not of the form User:NAME"},
		{name: "pattern type ANY", log: base, batch: batch(ACLRecord(id1, func() acl.Binding {
			b := read
			b.PatternType = kmsg.ACLResourcePatternTypeAny
			return b
		}())), errText: "pattern type ANY"},
		{name: "an out-of-range enum", log: base, batch: batch(&keelpb.Record{Record: &keelpb.Record_Acl{Acl: &keelpb.AccessControlEntryRecord{Id: id1[:], ResourceType: 1000}}}), errText: "out of range"},
		{name: "remove an unknown id", log: base, batch: batch(ACLRecord(id1, read), removeACL(id2)), errText: "no acl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := Empty()
			var err error
			for i, b := range tc.log {
				if img, err = Apply(img, uint64(i+1), 1, b); err != nil {
					t.Fatalf("log batch %d: %v", i, err)
				}
			}
			before := imageBytes(t, img)
			got, err := Apply(img, 100, 1, tc.batch)
			if tc.errText != "" {
				var re *RecordError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err %v, want %q", err, tc.errText)
				}
				if got != img || !bytes.Equal(imageBytes(t, img), before) {
					t.Fatal("a refused batch changed the image")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
			// The snapshot holds the ACLs: restored, the image writes the
			// same bytes and decides the same.
			restored, err := ReadSnapshot(bytes.NewReader(imageBytes(t, got)))
			if err != nil {
				t.Fatal(err)
			}
			if !sameImage(t, restored, got) {
				t.Fatal("the restored image differs")
			}
			tc.check(t, restored)
		})
	}
}

// TestLevelBlockers_ACLs: a downgrade below level 4 would drop the ACLs.
func TestLevelBlockers_ACLs(t *testing.T) {
	img, err := Apply(Empty(), 1, 1, batch(clusterID("c"), featureLevel(ACLMetadataVersion), epoch(1, 1), ACLRecord(ACLID{1}, aclBinding("User:a", "t", kmsg.ACLOperationRead))))
	if err != nil {
		t.Fatal(err)
	}
	if b := LevelBlockers(img, 3); len(b) != 1 || !strings.Contains(b[0], "1 ACLs") {
		t.Fatalf("blockers %v", b)
	}
}
