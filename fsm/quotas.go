package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Client quotas (KIP-13 byte rates, KIP-124 request percentage, KIP-546's
// records): a quota is a key and a value set on an entity, a user, a client
// id, or a user's client id, each named or the default of its type.
// Brokers pick the quota a request's (user, client id) falls under by
// Kafka's precedence (QuotaFor) and throttle the client past it.

// The entity types, as Kafka names them.
const (
	QuotaEntityUser     = "user"
	QuotaEntityClientID = "client-id"
	// quotaEntityIP is Kafka's entity for connection creation rates, which
	// Keel does not limit.
	quotaEntityIP = "ip"
)

// The quota keys.
const (
	// ProducerByteRate bounds the bytes per second a client produces.
	ProducerByteRate = "producer_byte_rate"
	// ConsumerByteRate bounds the bytes per second a client fetches.
	ConsumerByteRate = "consumer_byte_rate"
	// RequestPercentage bounds the share of one request-handling thread's
	// time (per cent, over each quota window) a client's requests take.
	RequestPercentage = "request_percentage"
	// controllerMutationRate is KIP-599's bound on topic creations,
	// deletions and partition additions per second: refused, not enforced.
	controllerMutationRate = "controller_mutation_rate"
)

// QuotaKeys are the quota keys Keel enforces, in name order.
var QuotaKeys = []string{ConsumerByteRate, ProducerByteRate, RequestPercentage}

// QuotaName is one part of a quota entity: absent (Set false), the
// default of its type, or a name.
type QuotaName struct {
	Set     bool
	Default bool
	Name    string
}

// Named is a QuotaName for name.
func Named(name string) QuotaName { return QuotaName{Set: true, Name: name} }

// DefaultName is the default entity of a type (Kafka's <default>).
var DefaultName = QuotaName{Set: true, Default: true}

func (n QuotaName) String() string {
	if n.Default {
		return "<default>"
	}
	return n.Name
}

// QuotaEntity is what a quota is set on: a user, a client id, or both. It
// is comparable, a map key.
type QuotaEntity struct {
	User, ClientID QuotaName
}

func (e QuotaEntity) String() string {
	var parts []string
	if e.User.Set {
		parts = append(parts, QuotaEntityUser+"="+e.User.String())
	}
	if e.ClientID.Set {
		parts = append(parts, QuotaEntityClientID+"="+e.ClientID.String())
	}
	return strings.Join(parts, ",")
}

// compareEntities orders entities as snapshots and listings give them.
func compareEntities(a, b QuotaEntity) int {
	key := func(n QuotaName) string {
		switch {
		case !n.Set:
			return ""
		case n.Default:
			return "\x01"
		}
		return "\x02" + n.Name
	}
	return cmp.Or(strings.Compare(key(a.User), key(b.User)), strings.Compare(key(a.ClientID), key(b.ClientID)))
}

// Data renders the entity as records and requests carry it: the user
// first.
func (e QuotaEntity) Data() []*keelpb.ClientQuotaEntityData {
	var out []*keelpb.ClientQuotaEntityData
	part := func(typ string, n QuotaName) {
		d := &keelpb.ClientQuotaEntityData{EntityType: typ}
		if !n.Default {
			d.EntityName = &n.Name
		}
		out = append(out, d)
	}
	if e.User.Set {
		part(QuotaEntityUser, e.User)
	}
	if e.ClientID.Set {
		part(QuotaEntityClientID, e.ClientID)
	}
	return out
}

// ParseQuotaEntity reads an entity as records and requests carry it, with
// Kafka's rules: at least one part, each type once, user and client-id
// only, no empty name (a default has none).
func ParseQuotaEntity(parts []*keelpb.ClientQuotaEntityData) (QuotaEntity, error) {
	var e QuotaEntity
	if len(parts) == 0 {
		return e, errors.New("the quota entity is empty: name a user, a client-id or both")
	}
	for _, p := range parts {
		var n *QuotaName
		switch p.GetEntityType() {
		case QuotaEntityUser:
			n = &e.User
		case QuotaEntityClientID:
			n = &e.ClientID
		case quotaEntityIP:
			return e, errors.New("ip quotas (connection_creation_rate) are not supported: Keel limits connections per source address with its connection limits")
		default:
			return e, fmt.Errorf("unknown quota entity type %q: want user or client-id", Truncate(p.GetEntityType()))
		}
		if n.Set {
			return e, fmt.Errorf("the quota entity names %s twice", p.GetEntityType())
		}
		switch {
		case p.EntityName == nil:
			*n = DefaultName
		case p.GetEntityName() == "":
			return e, fmt.Errorf("an empty %s is not an entity (leave the name out for the default)", p.GetEntityType())
		default:
			*n = Named(p.GetEntityName())
		}
	}
	return e, nil
}

// CheckClientQuota checks a quota key and value by Kafka's rules: a known
// key; byte rates whole numbers of bytes per second; every value positive
// (a quota of 0 would stop the client, and none is set by removing the
// quota).
func CheckClientQuota(key string, value float64) error {
	switch key {
	case ProducerByteRate, ConsumerByteRate:
		if math.IsNaN(value) || math.IsInf(value, 0) || value != math.Trunc(value) {
			return fmt.Errorf("%s must be a whole number of bytes per second, not %v", key, value)
		}
		if value < 1 || value > math.MaxInt64 {
			return fmt.Errorf("%s: %v is outside [1,%d]", key, value, int64(math.MaxInt64))
		}
	case RequestPercentage:
		if math.IsNaN(value) || math.IsInf(value, 0) || value <= 0 {
			return fmt.Errorf("%s: %v is not a positive percentage", key, value)
		}
	case controllerMutationRate:
		return fmt.Errorf("%s is not supported: Keel does not limit the rate of topic and partition changes", key)
	default:
		return fmt.Errorf("unknown quota key %q; Keel knows %s", Truncate(key), strings.Join(QuotaKeys, ", "))
	}
	return nil
}

// ClientQuota is one entity's quotas.
type ClientQuota struct {
	Entity QuotaEntity
	Values map[string]float64
}

// ClientQuotaCount is the number of entities with a quota.
func (img *Image) ClientQuotaCount() int { return len(img.clientQuotas) }

// ClientQuotas returns every entity's quotas, in entity order. The maps
// are the image's: read them only.
func (img *Image) ClientQuotas() []ClientQuota {
	out := make([]ClientQuota, 0, len(img.clientQuotas))
	for _, e := range slices.SortedFunc(maps.Keys(img.clientQuotas), compareEntities) {
		out = append(out, ClientQuota{Entity: e, Values: img.clientQuotas[e]})
	}
	return out
}

// ClientQuota returns entity e's value of key, if set.
func (img *Image) ClientQuota(e QuotaEntity, key string) (float64, bool) {
	v, ok := img.clientQuotas[e][key]
	return v, ok
}

// QuotaFor returns the quota of key that a client with principal name user
// and client id clientID falls under, by Kafka's precedence (the first
// that is set):
//
//  1. user and client id      5. default user, default client id
//  2. user, default client id 6. default user
//  3. user                    7. client id
//  4. default user, client id 8. default client id
//
// and the entity it shares its usage with (Kafka's quota metric tags): a
// quota of a user alone is shared by all its client ids, one of a client
// id alone by all users, one naming both is each (user, client id)'s own.
func (img *Image) QuotaFor(key, user, clientID string) (value float64, shared QuotaEntity, ok bool) {
	if len(img.clientQuotas) == 0 {
		return 0, QuotaEntity{}, false
	}
	u, c := Named(user), Named(clientID)
	both, userOnly, clientOnly := QuotaEntity{User: u, ClientID: c}, QuotaEntity{User: u}, QuotaEntity{ClientID: c}
	for _, cand := range [...]struct {
		entity, shared QuotaEntity
	}{
		{QuotaEntity{User: u, ClientID: c}, both},
		{QuotaEntity{User: u, ClientID: DefaultName}, both},
		{QuotaEntity{User: u}, userOnly},
		{QuotaEntity{User: DefaultName, ClientID: c}, both},
		{QuotaEntity{User: DefaultName, ClientID: DefaultName}, both},
		{QuotaEntity{User: DefaultName}, userOnly},
		{QuotaEntity{ClientID: c}, clientOnly},
		{QuotaEntity{ClientID: DefaultName}, clientOnly},
	} {
		if v, ok := img.clientQuotas[cand.entity][key]; ok {
			return v, cand.shared, true
		}
	}
	return 0, QuotaEntity{}, false
}

func applyClientQuota(img *Image, rec *keelpb.Record, _ *applyContext) error {
	r := rec.GetClientQuota()
	e, err := ParseQuotaEntity(r.GetEntity())
	if err != nil {
		return err
	}
	if !r.GetRemove() {
		if err := CheckClientQuota(r.GetKey(), r.GetValue()); err != nil {
			return err
		}
	} else if !slices.Contains(QuotaKeys, r.GetKey()) {
		return fmt.Errorf("unknown quota key %q", Truncate(r.GetKey()))
	}
	quotas := maps.Clone(img.clientQuotas[e])
	if r.GetRemove() {
		delete(quotas, r.GetKey())
	} else {
		if quotas == nil {
			quotas = map[string]float64{}
		}
		quotas[r.GetKey()] = r.GetValue()
	}
	img.clientQuotas = maps.Clone(img.clientQuotas)
	if len(quotas) == 0 {
		delete(img.clientQuotas, e)
	} else {
		if img.clientQuotas == nil {
			img.clientQuotas = map[QuotaEntity]map[string]float64{}
		}
		img.clientQuotas[e] = quotas
	}
	if len(img.clientQuotas) == 0 {
		img.clientQuotas = nil
	}
	return nil
}

// clientQuotaRecordCount is the number of records clientQuotaRecords
// writes.
func clientQuotaRecordCount(img *Image) int {
	n := 0
	for _, q := range img.clientQuotas {
		n += len(q)
	}
	return n
}

// clientQuotaRecords lists the client quotas as records, by entity then
// key, for a snapshot.
func clientQuotaRecords(img *Image, emit func(*keelpb.Record) error) error {
	for _, q := range img.ClientQuotas() {
		for _, k := range slices.Sorted(maps.Keys(q.Values)) {
			rec := &keelpb.ClientQuotaRecord{Entity: q.Entity.Data(), Key: k, Value: q.Values[k]}
			if err := emit(&keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: rec}}); err != nil {
				return err
			}
		}
	}
	return nil
}
