package controller

import (
	"context"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/scram"
	"github.com/keel-dev/keel/proto/keelpb"
)

// SCRAM credentials (KIP-554), as KRaft's ScramControlManager decides
// them: each user named in a request is checked on its own; the users
// without an error get their records, in one batch, and those with one get
// their error and nothing written. The client salts the password; the
// controller derives the stored and server keys, so that the log holds
// only those.

// scramResult is one user's outcome.
func scramResult(user string, code keelpb.ScramCredentialError, msg string) *keelpb.ScramCredentialResult {
	return &keelpb.ScramCredentialResult{User: user, Error: code, Message: msg}
}

// scramMechanism is the mechanism m names, if Keel knows it.
func scramMechanism(m keelpb.ScramMechanism) (scram.Mechanism, bool) {
	return scram.ByName(fsm.ScramMechanismName(m))
}

// alterScramRecords decides an AlterUserScramCredentials request against
// img: the records of the users it accepts, and a result for every user,
// in the order the request first names them.
func alterScramRecords(img *fsm.Image, req *keelpb.AlterUserScramCredentialsRequest) ([]*keelpb.Record, []*keelpb.ScramCredentialResult) {
	var order []string
	errs := map[string]*keelpb.ScramCredentialResult{}
	named := map[string]bool{}
	// name: a user's first mention, or its duplicate's refusal (Kafka
	// refuses a user altered twice in one request, whatever the
	// mechanisms).
	name := func(user string) bool {
		if named[user] {
			if errs[user] == nil {
				errs[user] = scramResult(user, keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_DUPLICATE_RESOURCE,
					"A user credential cannot be altered twice in the same request")
			}
			return false
		}
		named[user] = true
		order = append(order, user)
		return true
	}
	supported := img.FinalizedMetadataVersion() >= fsm.ScramCredentialsMetadataVersion
	check := func(user string, m keelpb.ScramMechanism) *keelpb.ScramCredentialResult {
		switch {
		case !supported:
			return scramResult(user, keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_VERSION,
				"The current metadata.version does not support SCRAM (keel features upgrade)")
		case user == "":
			return scramResult(user, keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
		case fsm.ScramKeySize(m) == 0:
			return scramResult(user, keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
		}
		return nil
	}
	recs := map[string]*keelpb.Record{}
	for _, d := range req.GetDeletions() {
		if !name(d.GetName()) {
			continue
		}
		if e := check(d.GetName(), d.GetMechanism()); e != nil {
			errs[d.GetName()] = e
			continue
		}
		if _, ok := img.ScramCredential(d.GetName(), d.GetMechanism()); !ok {
			errs[d.GetName()] = scramResult(d.GetName(), keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_RESOURCE_NOT_FOUND,
				"Attempt to delete a user credential that does not exist")
			continue
		}
		recs[d.GetName()] = &keelpb.Record{Record: &keelpb.Record_RemoveUserScramCredential{RemoveUserScramCredential: &keelpb.RemoveUserScramCredentialRecord{
			Name: d.GetName(), Mechanism: d.GetMechanism()}}}
	}
	for _, u := range req.GetUpsertions() {
		if !name(u.GetName()) {
			continue
		}
		if e := check(u.GetName(), u.GetMechanism()); e != nil {
			errs[u.GetName()] = e
			continue
		}
		m, _ := scramMechanism(u.GetMechanism())
		rec := &keelpb.UserScramCredentialRecord{Name: u.GetName(), Mechanism: u.GetMechanism(), Salt: u.GetSalt(), Iterations: u.GetIterations()}
		if len(u.GetSaltedPassword()) > 0 {
			rec.StoredKey, rec.ServerKey = m.Keys(u.GetSaltedPassword())
		}
		if err := fsm.CheckScramCredential(rec); err != nil || len(u.GetSaltedPassword()) == 0 {
			msg := "the salted password is empty"
			if err != nil {
				msg = err.Error()
			}
			errs[u.GetName()] = scramResult(u.GetName(), keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNACCEPTABLE_CREDENTIAL, msg)
			continue
		}
		recs[u.GetName()] = &keelpb.Record{Record: &keelpb.Record_UserScramCredential{UserScramCredential: rec}}
	}
	var out []*keelpb.Record
	results := make([]*keelpb.ScramCredentialResult, 0, len(order))
	for _, user := range order {
		if e := errs[user]; e != nil {
			results = append(results, e)
			continue
		}
		out = append(out, recs[user])
		results = append(results, scramResult(user, keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_NONE, ""))
	}
	return out, results
}

// AlterUserScramCredentials deletes and sets SCRAM credentials, as one
// decision on the event loop; the answer has a result per user. A request
// none of whose users is accepted writes nothing, and is answered once
// this controller has confirmed that it still leads. Errors are decide's.
func (c *Controller) AlterUserScramCredentials(ctx context.Context, req *keelpb.AlterUserScramCredentialsRequest) ([]*keelpb.ScramCredentialResult, error) {
	var results []*keelpb.ScramCredentialResult
	index, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		recs, results = alterScramRecords(img, req)
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	if index > 0 {
		changed := 0
		for _, r := range results {
			if r.GetError() == keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_NONE {
				changed++
			}
		}
		// Names and counts only: never a key.
		c.log.Info("SCRAM credentials altered", "users", changed, "principal", req.GetPrincipal(), "index", index)
	}
	return results, nil
}
