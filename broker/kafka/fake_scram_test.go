package kafka

import (
	"context"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/scram"
	"github.com/keel-dev/keel/proto/keelpb"
)

// AlterUserScramCredentials writes the request's credentials as the
// controller would when every user is accepted: the keys derived from the
// salted password. The controller's own per-user checks are its tests'.
func (m *fakeMeta) AlterUserScramCredentials(_ context.Context, req *keelpb.AlterUserScramCredentialsRequest) (*keelpb.AlterUserScramCredentialsResponse, error) {
	m.forwarded(req.GetPrincipal())
	var recs []*keelpb.Record
	resp := &keelpb.AlterUserScramCredentialsResponse{}
	for _, d := range req.GetDeletions() {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_RemoveUserScramCredential{RemoveUserScramCredential: &keelpb.RemoveUserScramCredentialRecord{
			Name: d.GetName(), Mechanism: d.GetMechanism()}}})
		resp.Results = append(resp.Results, &keelpb.ScramCredentialResult{User: d.GetName()})
	}
	for _, u := range req.GetUpsertions() {
		mech, _ := scram.ByName(fsm.ScramMechanismName(u.GetMechanism()))
		stored, server := mech.Keys(u.GetSaltedPassword())
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_UserScramCredential{UserScramCredential: &keelpb.UserScramCredentialRecord{
			Name: u.GetName(), Mechanism: u.GetMechanism(), Salt: u.GetSalt(), StoredKey: stored, ServerKey: server, Iterations: u.GetIterations()}}})
		resp.Results = append(resp.Results, &keelpb.ScramCredentialResult{User: u.GetName()})
	}
	if err := m.apply(recs...); err != nil {
		return nil, err
	}
	return resp, nil
}
