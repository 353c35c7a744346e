package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

const sha512 = keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512

func scramCred(user string, m keelpb.ScramMechanism, iterations int32) *keelpb.Record {
	size := max(ScramKeySize(m), 1)
	return &keelpb.Record{Record: &keelpb.Record_UserScramCredential{UserScramCredential: &keelpb.UserScramCredentialRecord{
		Name: user, Mechanism: m, Salt: []byte("salt"), StoredKey: bytes.Repeat([]byte{1}, size),
		ServerKey: bytes.Repeat([]byte{2}, size), Iterations: iterations}}}
}

func removeScram(user string, m keelpb.ScramMechanism) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_RemoveUserScramCredential{RemoveUserScramCredential: &keelpb.RemoveUserScramCredentialRecord{Name: user, Mechanism: m}}}
}

// TestFSM_ScramCredentials: credential records are applied whole or
// refused whole (Kafka's validateUpsertion bounds), need metadata.version
// 4, survive a snapshot, and hold a downgrade back.
func TestFSM_ScramCredentials(t *testing.T) {
	at4 := []*keelpb.RecordBatch{batch(clusterID("c"), featureLevel(4), epoch(1, 1))}
	tests := []struct {
		name    string
		log     []*keelpb.RecordBatch
		batch   *keelpb.RecordBatch
		wantErr error
		errText string
		check   func(*testing.T, *Image)
	}{
		{name: "set, then replace", log: at4, batch: batch(scramCred("alice", sha512, 4096), scramCred("alice", sha512, 8192)),
			check: func(t *testing.T, img *Image) {
				c, ok := img.ScramCredential("alice", sha512)
				if !ok || c.Iterations != 8192 || len(img.ScramCredentials()) != 1 {
					t.Fatalf("credential %+v, %v", c, ok)
				}
			}},
		{name: "remove", log: append(at4, batch(scramCred("alice", sha512, 4096))), batch: batch(removeScram("alice", sha512)),
			check: func(t *testing.T, img *Image) {
				if _, ok := img.ScramCredential("alice", sha512); ok {
					t.Fatal("credential still held")
				}
			}},
		{name: "remove one that does not exist", log: at4, batch: batch(removeScram("alice", sha512)), errText: "has no"},
		{name: "too few iterations", log: at4, batch: batch(scramCred("alice", sha512, 4095)), errText: "too few"},
		{name: "too many iterations", log: at4, batch: batch(scramCred("alice", sha512, 16385)), errText: "too many"},
		{name: "unknown mechanism", log: at4, batch: batch(scramCred("alice", 3, 4096)), errText: "unknown SCRAM mechanism"},
		{name: "empty name", log: at4, batch: batch(scramCred("", sha512, 4096)), errText: "name is empty"},
		{name: "a good record, then a bad one: nothing applied", log: at4,
			batch: batch(scramCred("bob", sha512, 4096), scramCred("alice", sha512, 1)), errText: "too few"},
		{name: "below metadata.version 4", log: []*keelpb.RecordBatch{batch(clusterID("c"), featureLevel(3), epoch(1, 1))},
			batch: batch(scramCred("alice", sha512, 4096)), wantErr: ErrAboveMetadataVersion},
		{name: "a downgrade would drop credentials", log: append(at4, batch(scramCred("alice", sha512, 4096))),
			batch: batch(featureLevel(3)), wantErr: ErrUnsafeDowngrade, errText: "1 SCRAM credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := replay(t, tt.log...)
			before := imageBytes(t, start)
			got, err := Apply(start, uint64(len(tt.log)+1), 1, tt.batch)
			if !bytes.Equal(imageBytes(t, start), before) {
				t.Fatal("Apply modified the image it was given")
			}
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
			// A snapshot holds the credentials: restored, it writes the
			// same bytes.
			restored, err := ReadSnapshot(bytes.NewReader(imageBytes(t, got)))
			if err != nil || !sameImage(t, got, restored) || len(restored.ScramCredentials()) != len(got.ScramCredentials()) {
				t.Fatalf("restore: %v", err)
			}
		})
	}
}
