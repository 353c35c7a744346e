package controller

import (
	"bytes"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/scram"
	"github.com/keel-dev/keel/proto/keelpb"
)

const (
	scramSHA256 = keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256
	scramSHA512 = keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512
)

func upsert(user string, m keelpb.ScramMechanism, iterations int32) *keelpb.ScramCredentialUpsertion {
	return &keelpb.ScramCredentialUpsertion{Name: user, Mechanism: m, Iterations: iterations, Salt: []byte("salt"), SaltedPassword: []byte("salted")}
}

func deletion(user string, m keelpb.ScramMechanism) *keelpb.ScramCredentialDeletion {
	return &keelpb.ScramCredentialDeletion{Name: user, Mechanism: m}
}

// scramImage is an image at metadata.version level.
func scramImage(t *testing.T, level uint32) *fsm.Image {
	t.Helper()
	img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c"}}},
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: level}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestScramControlManager_AlterCredentials: Kafka's
// ScramControlManagerTest.testAlterCredentials in Keel's terms: each user
// is decided on its own, with Kafka's per-user errors; the accepted users'
// records replay into the FSM, which then holds the keys derived from the
// salted password, never the salted password itself.
func TestScramControlManager_AlterCredentials(t *testing.T) {
	img := scramImage(t, fsm.MaxMetadataVersion)
	const (
		none      = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_NONE
		dup       = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_DUPLICATE_RESOURCE
		notFound  = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_RESOURCE_NOT_FOUND
		mechanism = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_SASL_MECHANISM
		bad       = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNACCEPTABLE_CREDENTIAL
		version   = keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_VERSION
	)
	steps := []struct {
		name string
		img  *fsm.Image // nil: the previous step's
		req  *keelpb.AlterUserScramCredentialsRequest
		want map[string]keelpb.ScramCredentialError
		held []string // user/mechanism held afterwards
	}{
		{name: "create alice and bob", req: &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
			upsert("alice", scramSHA512, 4096), upsert("bob", scramSHA256, 16384)}},
			want: map[string]keelpb.ScramCredentialError{"alice": none, "bob": none}, held: []string{"alice/2", "bob/1"}},
		{name: "a user altered twice, whatever the mechanisms, is refused; the others are not", req: &keelpb.AlterUserScramCredentialsRequest{
			Deletions:  []*keelpb.ScramCredentialDeletion{deletion("alice", scramSHA512)},
			Upsertions: []*keelpb.ScramCredentialUpsertion{upsert("alice", scramSHA256, 4096), upsert("carol", scramSHA256, 4096)}},
			want: map[string]keelpb.ScramCredentialError{"alice": dup, "carol": none}, held: []string{"alice/2", "bob/1", "carol/1"}},
		{name: "deleting what does not exist", req: &keelpb.AlterUserScramCredentialsRequest{Deletions: []*keelpb.ScramCredentialDeletion{
			deletion("bob", scramSHA512), deletion("nobody", scramSHA256), deletion("carol", scramSHA256)}},
			want: map[string]keelpb.ScramCredentialError{"bob": notFound, "nobody": notFound, "carol": none}, held: []string{"alice/2", "bob/1"}},
		{name: "bad credentials", req: &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
			upsert("few", scramSHA512, 4095), upsert("many", scramSHA512, 16385), upsert("", scramSHA512, 4096),
			upsert("md5", 7, 4096), {Name: "nosalt", Mechanism: scramSHA512, Iterations: 4096, SaltedPassword: []byte("x")},
			{Name: "nopassword", Mechanism: scramSHA512, Iterations: 4096, Salt: []byte("x")}}},
			want: map[string]keelpb.ScramCredentialError{"few": bad, "many": bad, "": bad, "md5": mechanism, "nosalt": bad, "nopassword": bad},
			held: []string{"alice/2", "bob/1"}},
		{name: "below metadata.version 4", img: scramImage(t, 3), req: &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
			upsert("alice", scramSHA512, 4096)}}, want: map[string]keelpb.ScramCredentialError{"alice": version}},
	}
	var held4 *fsm.Image
	for _, st := range steps {
		if st.img != nil {
			held4, img = img, st.img
		}
		recs, results := alterScramRecords(img, st.req)
		got := map[string]keelpb.ScramCredentialError{}
		for _, r := range results {
			if _, twice := got[r.GetUser()]; twice {
				t.Fatalf("%s: user %q has two results", st.name, r.GetUser())
			}
			got[r.GetUser()] = r.GetError()
		}
		if len(got) != len(st.want) {
			t.Fatalf("%s: results %v, want %v", st.name, got, st.want)
		}
		for u, e := range st.want {
			if got[u] != e {
				t.Fatalf("%s: %q got %v, want %v", st.name, u, got[u], e)
			}
		}
		if len(recs) > 0 {
			next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				t.Fatalf("%s: the FSM refused the decision: %v", st.name, err)
			}
			img = next
		}
		var held []string
		for _, c := range img.ScramCredentials() {
			held = append(held, c.User+"/"+string(rune('0'+c.Mechanism)))
		}
		if len(held) != len(st.held) {
			t.Fatalf("%s: held %v, want %v", st.name, held, st.held)
		}
		for i := range held {
			if held[i] != st.held[i] {
				t.Fatalf("%s: held %v, want %v", st.name, held, st.held)
			}
		}
	}
	c, _ := held4.ScramCredential("alice", scramSHA512)
	stored, server := scram.SHA512.Keys([]byte("salted"))
	if !bytes.Equal(c.StoredKey, stored) || !bytes.Equal(c.ServerKey, server) || bytes.Equal(c.StoredKey, []byte("salted")) {
		t.Fatal("the credential does not hold the keys derived from the salted password")
	}
}
