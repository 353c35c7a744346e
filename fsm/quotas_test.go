package fsm

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

func quotaRec(e QuotaEntity, key string, value float64, remove bool) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{
		Entity: e.Data(), Key: key, Value: value, Remove: remove}}}
}

// quotaImage is an image at the level that allows client quotas, with
// recs applied.
func quotaImage(t *testing.T, recs ...*keelpb.Record) *Image {
	t.Helper()
	img, err := Apply(Empty(), 1, 1, batch(append([]*keelpb.Record{featureLevel(ClientQuotaMetadataVersion)}, recs...)...))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestFSM_ClientQuotaRecords(t *testing.T) {
	alice := QuotaEntity{User: Named("alice")}
	aliceApp := QuotaEntity{User: Named("alice"), ClientID: Named("app")}
	defaults := QuotaEntity{User: DefaultName, ClientID: DefaultName}
	raw := func(parts []*keelpb.ClientQuotaEntityData, key string, value float64) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{Entity: parts, Key: key, Value: value}}}
	}
	name := func(s string) *string { return &s }
	tests := []struct {
		name    string
		recs    []*keelpb.Record
		wantErr string
		check   func(t *testing.T, img *Image)
	}{
		{name: "set, then change", recs: []*keelpb.Record{quotaRec(alice, ProducerByteRate, 1024, false), quotaRec(alice, ProducerByteRate, 2048, false)},
			check: func(t *testing.T, img *Image) {
				if v, ok := img.ClientQuota(alice, ProducerByteRate); !ok || v != 2048 {
					t.Fatalf("alice's producer_byte_rate = %v, %v; want 2048", v, ok)
				}
			}},
		{name: "removing the last key drops the entity", recs: []*keelpb.Record{quotaRec(alice, ProducerByteRate, 1024, false), quotaRec(alice, ProducerByteRate, 0, true)},
			check: func(t *testing.T, img *Image) {
				if img.ClientQuotaCount() != 0 {
					t.Fatalf("quotas = %v; want none", img.ClientQuotas())
				}
			}},
		{name: "removing an unset key is no change", recs: []*keelpb.Record{quotaRec(aliceApp, RequestPercentage, 0, true)}},
		{name: "defaults and a user's client id", recs: []*keelpb.Record{quotaRec(defaults, ConsumerByteRate, 10, false), quotaRec(aliceApp, RequestPercentage, 12.5, false)},
			check: func(t *testing.T, img *Image) {
				got := img.ClientQuotas()
				if len(got) != 2 || got[0].Entity != defaults || got[1].Entity != aliceApp || got[1].Values[RequestPercentage] != 12.5 {
					t.Fatalf("quotas = %+v", got)
				}
			}},
		{name: "unknown key", recs: []*keelpb.Record{quotaRec(alice, "producer_bytes", 1, false)}, wantErr: `unknown quota key "producer_bytes"`},
		{name: "controller_mutation_rate is refused with its reason", recs: []*keelpb.Record{quotaRec(alice, "controller_mutation_rate", 1, false)},
			wantErr: "controller_mutation_rate is not supported"},
		{name: "negative rate", recs: []*keelpb.Record{quotaRec(alice, ProducerByteRate, -5, false)}, wantErr: "-5 is outside"},
		{name: "zero rate", recs: []*keelpb.Record{quotaRec(alice, ConsumerByteRate, 0, false)}, wantErr: "0 is outside"},
		{name: "fractional byte rate", recs: []*keelpb.Record{quotaRec(alice, ProducerByteRate, 1.5, false)}, wantErr: "whole number"},
		{name: "NaN percentage", recs: []*keelpb.Record{quotaRec(alice, RequestPercentage, math.NaN(), false)}, wantErr: "not a positive percentage"},
		{name: "empty entity", recs: []*keelpb.Record{raw(nil, ProducerByteRate, 1)}, wantErr: "entity is empty"},
		{name: "entity named twice", recs: []*keelpb.Record{raw([]*keelpb.ClientQuotaEntityData{{EntityType: "user", EntityName: name("a")}, {EntityType: "user", EntityName: name("b")}}, ProducerByteRate, 1)},
			wantErr: "names user twice"},
		{name: "unknown entity type", recs: []*keelpb.Record{raw([]*keelpb.ClientQuotaEntityData{{EntityType: "group", EntityName: name("a")}}, ProducerByteRate, 1)},
			wantErr: `unknown quota entity type "group"`},
		{name: "ip entity", recs: []*keelpb.Record{raw([]*keelpb.ClientQuotaEntityData{{EntityType: "ip", EntityName: name("10.0.0.1")}}, ProducerByteRate, 1)},
			wantErr: "ip quotas"},
		{name: "empty name", recs: []*keelpb.Record{raw([]*keelpb.ClientQuotaEntityData{{EntityType: "client-id", EntityName: name("")}}, ProducerByteRate, 1)},
			wantErr: "empty client-id"},
		{name: "a bad record refuses its whole batch", recs: []*keelpb.Record{quotaRec(alice, ProducerByteRate, 1024, false), quotaRec(alice, ConsumerByteRate, -1, false)},
			wantErr: "record 1 (client_quota)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := quotaImage(t)
			got, err := Apply(start, 2, 1, batch(tt.recs...))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want %q", err, tt.wantErr)
				}
				if got != start || got.ClientQuotaCount() != 0 {
					t.Fatal("a refused batch changed the image")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
			// What the image holds survives a snapshot whole.
			restored, err := ReadSnapshot(bytes.NewReader(imageBytes(t, got)))
			if err != nil {
				t.Fatal(err)
			}
			if !sameImage(t, restored, got) {
				t.Fatal("the restored image differs")
			}
		})
	}
}

// TestFSM_ClientQuotaNeedsItsLevel: a quota record is refused below
// metadata.version 4, and the level cannot drop below 4 while quotas are
// set.
func TestFSM_ClientQuotaNeedsItsLevel(t *testing.T) {
	img, err := Apply(Empty(), 1, 1, batch(featureLevel(3)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(img, 2, 1, batch(quotaRec(QuotaEntity{User: DefaultName}, ProducerByteRate, 1, false))); err == nil ||
		!strings.Contains(err.Error(), "a client_quota record needs metadata.version 4; the cluster is at 3") {
		t.Fatalf("err = %v", err)
	}
	img = quotaImage(t, quotaRec(QuotaEntity{User: DefaultName}, ProducerByteRate, 1, false))
	if _, err := Apply(img, 2, 1, batch(featureLevel(3))); err == nil || !strings.Contains(err.Error(), "1 client quota entities (metadata.version 4) would be dropped") {
		t.Fatalf("err = %v", err)
	}
}

// TestImage_QuotaFor: Kafka's precedence of quota entities, with the cases
// of ClientQuotaManagerTest.
func TestImage_QuotaFor(t *testing.T) {
	u, c := Named("userA"), Named("client1")
	set := func(pairs ...any) *Image {
		var recs []*keelpb.Record
		for i := 0; i < len(pairs); i += 2 {
			recs = append(recs, quotaRec(pairs[i].(QuotaEntity), ProducerByteRate, pairs[i+1].(float64), false))
		}
		return quotaImage(t, recs...)
	}
	// testQuotaConfigPrecedence: each level set on top of the ones below
	// it wins, from the default client id up to the user's client id.
	levels := []QuotaEntity{
		{ClientID: DefaultName},
		{ClientID: c},
		{User: DefaultName},
		{User: DefaultName, ClientID: DefaultName},
		{User: DefaultName, ClientID: c},
		{User: u},
		{User: u, ClientID: DefaultName},
		{User: u, ClientID: c},
	}
	shared := []QuotaEntity{
		{ClientID: c}, {ClientID: c}, {User: u}, {User: u, ClientID: c},
		{User: u, ClientID: c}, {User: u}, {User: u, ClientID: c}, {User: u, ClientID: c},
	}
	var pairs []any
	for i, e := range levels {
		pairs = append(pairs, e, float64(1000*(i+1)))
		img := set(pairs...)
		v, sh, ok := img.QuotaFor(ProducerByteRate, "userA", "client1")
		if !ok || v != float64(1000*(i+1)) || sh != shared[i] {
			t.Errorf("testQuotaConfigPrecedence with %s on top: quota %v (shared by %s, %v); want %d shared by %s", e, v, sh, ok, 1000*(i+1), shared[i])
		}
	}

	tests := []struct {
		name         string
		img          *Image
		user, client string
		want         float64
		ok           bool
	}{
		{name: "testClientIdQuotaParsing: a named client id", img: set(QuotaEntity{ClientID: c}, 2000.0, QuotaEntity{ClientID: DefaultName}, 500.0),
			user: "anyone", client: "client1", want: 2000, ok: true},
		{name: "testClientIdQuotaParsing: another client id takes the default", img: set(QuotaEntity{ClientID: c}, 2000.0, QuotaEntity{ClientID: DefaultName}, 500.0),
			user: "anyone", client: "client2", want: 500, ok: true},
		{name: "testUserQuotaParsing: a user's quota covers each of its client ids", img: set(QuotaEntity{User: u}, 3000.0),
			user: "userA", client: "whatever", want: 3000, ok: true},
		{name: "testUserQuotaParsing: another user has none", img: set(QuotaEntity{User: u}, 3000.0),
			user: "userB", client: "client1", ok: false},
		{name: "testUserClientIdQuotaParsing: a user's other client id", img: set(QuotaEntity{User: u, ClientID: c}, 4000.0, QuotaEntity{User: u, ClientID: DefaultName}, 100.0),
			user: "userA", client: "client9", want: 100, ok: true},
		{name: "testQuotaParsingWithDefaultUser: the default user beats a client id", img: set(QuotaEntity{User: DefaultName}, 700.0, QuotaEntity{ClientID: c}, 9000.0),
			user: "userB", client: "client1", want: 700, ok: true},
		{name: "no quotas", img: quotaImage(t), user: "userA", client: "client1"},
	}
	for _, tt := range tests {
		v, _, ok := tt.img.QuotaFor(ProducerByteRate, tt.user, tt.client)
		if ok != tt.ok || v != tt.want {
			t.Errorf("%s: got %v, %v; want %v, %v", tt.name, v, ok, tt.want, tt.ok)
		}
		if _, _, ok := tt.img.QuotaFor(ConsumerByteRate, tt.user, tt.client); ok {
			t.Errorf("%s: a producer quota gave a consumer one", tt.name)
		}
	}
}
