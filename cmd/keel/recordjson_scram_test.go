package main

import (
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestRecordJSON_RedactsScramKeys: a SCRAM credential record shows its
// user, mechanism and iterations, never its salt or keys, as Kafka's
// RecordRedactor prints it.
func TestRecordJSON_RedactsScramKeys(t *testing.T) {
	rec := &keelpb.UserScramCredentialRecord{Name: "app", Mechanism: keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512,
		Salt: []byte("salt-bytes"), StoredKey: []byte("stored-key"), ServerKey: []byte("server-key"), Iterations: 8192}
	got := string(appendMessageJSON(nil, rec.ProtoReflect()))
	want := `{"name":"app","mechanism":"SCRAM_MECHANISM_SCRAM_SHA_512","salt":"(redacted)","stored_key":"(redacted)","server_key":"(redacted)","iterations":8192}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, secret := range []string{"c2FsdC1ieXRlcw", "c3RvcmVkLWtleQ", "c2VydmVyLWtleQ"} {
		if strings.Contains(got, secret) {
			t.Fatalf("%s shows a secret", got)
		}
	}
}
