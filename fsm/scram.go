package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/keel-dev/keel/proto/keelpb"
)

// SCRAM credentials (KIP-554, KRaft's ScramControlManager): per user and
// mechanism, the salt, the iteration count and the two keys RFC 5802
// derives from the salted password. A broker's SASL listener verifies a
// login against them; nothing here, nor in any record, holds a password.

// ScramCredentialsMetadataVersion is the level that introduced the
// UserScramCredential and RemoveUserScramCredential records.
const ScramCredentialsMetadataVersion uint32 = 4

// Kafka's bounds on a SCRAM credential's iterations (ScramMechanism's
// minIterations, ScramControlManager's MAX_ITERATIONS).
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
)

// ScramKeySize is the size of a mechanism's stored and server keys (its
// hash's), 0 for a mechanism Keel does not know.
func ScramKeySize(m keelpb.ScramMechanism) int {
	switch m {
	case keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256:
		return 32
	case keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512:
		return 64
	}
	return 0
}

// ScramMechanismName is the mechanism's SASL name (SCRAM-SHA-256,
// SCRAM-SHA-512), or "" for an unknown one.
func ScramMechanismName(m keelpb.ScramMechanism) string {
	switch m {
	case keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256:
		return "SCRAM-SHA-256"
	case keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512:
		return "SCRAM-SHA-512"
	}
	return ""
}

// ScramMechanismByName is the inverse of ScramMechanismName.
func ScramMechanismByName(name string) (keelpb.ScramMechanism, bool) {
	for _, m := range []keelpb.ScramMechanism{keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_256, keelpb.ScramMechanism_SCRAM_MECHANISM_SCRAM_SHA_512} {
		if ScramMechanismName(m) == name {
			return m, true
		}
	}
	return keelpb.ScramMechanism_SCRAM_MECHANISM_UNKNOWN, false
}

// ScramKey names one credential: a user and a mechanism.
type ScramKey struct {
	User      string
	Mechanism keelpb.ScramMechanism
}

// ScramCredential is one user's credential for one mechanism. Never
// modified once published.
type ScramCredential struct {
	ScramKey
	Salt, StoredKey, ServerKey []byte
	Iterations                 int32
}

// ScramCredential returns user's credential for mechanism m, if any.
func (img *Image) ScramCredential(user string, m keelpb.ScramMechanism) (*ScramCredential, bool) {
	c, ok := img.scram[ScramKey{User: user, Mechanism: m}]
	return c, ok
}

// ScramCredentials returns every credential, by user, then mechanism.
func (img *Image) ScramCredentials() []*ScramCredential {
	keys := slices.SortedFunc(maps.Keys(img.scram), func(a, b ScramKey) int {
		return cmp.Or(cmp.Compare(a.User, b.User), cmp.Compare(a.Mechanism, b.Mechanism))
	})
	out := make([]*ScramCredential, len(keys))
	for i, k := range keys {
		out[i] = img.scram[k]
	}
	return out
}

// CheckScramCredential is the rule a credential record keeps (Kafka's
// validateUpsertion, and the keys' sizes): the controller checks a request
// by it before deciding, and the state machine refuses a record that
// breaks it.
func CheckScramCredential(r *keelpb.UserScramCredentialRecord) error {
	size := ScramKeySize(r.GetMechanism())
	switch {
	case r.GetName() == "":
		return errors.New("the user name is empty")
	case size == 0:
		return fmt.Errorf("unknown SCRAM mechanism %v", r.GetMechanism())
	case r.GetIterations() < MinScramIterations:
		return fmt.Errorf("%d iterations are too few: at least %d", r.GetIterations(), MinScramIterations)
	case r.GetIterations() > MaxScramIterations:
		return fmt.Errorf("%d iterations are too many: at most %d", r.GetIterations(), MaxScramIterations)
	case len(r.GetSalt()) == 0:
		return errors.New("the salt is empty")
	case len(r.GetStoredKey()) != size || len(r.GetServerKey()) != size:
		return fmt.Errorf("%s keys have %d bytes", ScramMechanismName(r.GetMechanism()), size)
	}
	return nil
}

func applyUserScramCredential(img *Image, rec *keelpb.Record, _ *applyContext) error {
	r := rec.GetUserScramCredential()
	if err := CheckScramCredential(r); err != nil {
		return err
	}
	k := ScramKey{User: r.GetName(), Mechanism: r.GetMechanism()}
	img.scram = maps.Clone(img.scram)
	if img.scram == nil {
		img.scram = map[ScramKey]*ScramCredential{}
	}
	img.scram[k] = &ScramCredential{ScramKey: k, Salt: r.GetSalt(), StoredKey: r.GetStoredKey(),
		ServerKey: r.GetServerKey(), Iterations: r.GetIterations()}
	return nil
}

func applyRemoveUserScramCredential(img *Image, rec *keelpb.Record, _ *applyContext) error {
	r := rec.GetRemoveUserScramCredential()
	k := ScramKey{User: r.GetName(), Mechanism: r.GetMechanism()}
	if _, ok := img.scram[k]; !ok {
		return fmt.Errorf("user %q has no %v credential", k.User, k.Mechanism)
	}
	img.scram = maps.Clone(img.scram)
	delete(img.scram, k)
	return nil
}

// scramRecords lists the credentials as records, by user and mechanism.
func scramRecords(img *Image, emit func(*keelpb.Record) error) error {
	for _, c := range img.ScramCredentials() {
		rec := &keelpb.UserScramCredentialRecord{Name: c.User, Mechanism: c.Mechanism, Salt: c.Salt,
			StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_UserScramCredential{UserScramCredential: rec}}); err != nil {
			return err
		}
	}
	return nil
}
