package kafka

import (
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The APIs Keel does not serve (transactions, KIP-848's and KIP-932's
// groups, delegation tokens, the inter-broker and KRaft APIs, ...): a
// client that sends one anyway, without asking ApiVersions first or
// trusting its answer, gets the request's own response with
// UNSUPPORTED_VERSION and a message that names what Keel does not serve,
// on a connection that stays open, rather than a closed connection it
// would retry forever. An API key kmsg does not know, a version above
// kmsg's for the key, or a body that does not parse still closes the
// connection, as Kafka closes it.

// transactionKeys are the transaction coordinator's APIs.
var transactionKeys = map[int16]bool{
	24: true, // AddPartitionsToTxn
	25: true, // AddOffsetsToTxn
	26: true, // EndTxn
	27: true, // WriteTxnMarkers
	28: true, // TxnOffsetCommit
	65: true, // DescribeTransactions
	66: true, // ListTransactions
}

// unservedMessage says what Keel does not serve.
func unservedMessage(key int16) string {
	if transactionKeys[key] {
		return fmt.Sprintf("%s (%s)", noTransactions, kmsg.NameForKey(key))
	}
	return fmt.Sprintf("Keel does not serve %s", kmsg.NameForKey(key))
}

// unservedResponse parses a request of an API that is not served and
// builds its error response at the request's version, or fails when kmsg
// cannot read it (the connection then closes).
func unservedResponse(key, version int16, body []byte) (kmsg.Request, kmsg.Response, error) {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, nil, fmt.Errorf("API key %d is not served", key)
	}
	if version < 0 || version > req.MaxVersion() {
		return nil, nil, fmt.Errorf("%s v%d is not served", kmsg.NameForKey(key), version)
	}
	req.SetVersion(version)
	if req.IsFlexible() {
		rd := kbin.Reader{Src: body}
		if !skipTags(&rd) {
			return nil, nil, fmt.Errorf("%s v%d: malformed request header tags", kmsg.NameForKey(key), version)
		}
		body = rd.Src
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, nil, fmt.Errorf("%s v%d (not served) does not parse: %v", kmsg.NameForKey(key), version, err)
	}
	return req, errorResponse(req, kerr.UnsupportedVersion.Code, unservedMessage(key)), nil
}

// errorResponse is req's response at its version with code (and msg,
// where it has an ErrorMessage) as its top-level error and every entry's.
// Both: kmsg's structs hold the fields of every version, and only those of
// the request's are sent (AddPartitionsToTxn has a top-level ErrorCode
// from v4, per-partition codes before).
func errorResponse(req kmsg.Request, code int16, msg string) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	setError(reflect.ValueOf(resp).Elem(), code, msg)
	mirror(reflect.ValueOf(resp).Elem(), reflect.ValueOf(req).Elem(), code, msg)
	return resp
}

// setError sets a response struct's ErrorCode (and ErrorMessage, when it
// has one), and says whether it has an ErrorCode.
func setError(resp reflect.Value, code int16, msg string) bool {
	ec := resp.FieldByName("ErrorCode")
	if !ec.IsValid() || ec.Kind() != reflect.Int16 {
		return false
	}
	ec.SetInt(int64(code))
	if em := resp.FieldByName("ErrorMessage"); msg != "" && em.IsValid() && em.Type() == reflect.TypeOf((*string)(nil)) {
		em.Set(reflect.ValueOf(&msg))
	}
	return true
}

// copyNames copies the request entry's fields that the response entry has
// by the same name and type (Topic, Partition, Group, ...), lists aside,
// so that the entry names what it answers.
func copyNames(resp, req reflect.Value) {
	for i := 0; i < resp.NumField(); i++ {
		f := resp.Type().Field(i)
		if f.Name == "ErrorCode" || f.Name == "ErrorMessage" || f.Name == "Version" || f.Type.Kind() == reflect.Slice {
			continue
		}
		if rf := req.FieldByName(f.Name); rf.IsValid() && rf.Type() == f.Type {
			resp.Field(i).Set(rf)
		}
	}
}

// mirror answers a response entry by entry: each list of the response that the request has too (by field
// name) gets one entry per request entry, with the error where the entry
// has an ErrorCode and its own lists mirrored the same way. A request
// list of partition numbers ([]int32) becomes entries whose Partition is
// each number.
func mirror(resp, req reflect.Value, code int16, msg string) {
	for i := 0; i < resp.NumField(); i++ {
		f := resp.Type().Field(i)
		if f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		rf := req.FieldByName(f.Name)
		if !rf.IsValid() || rf.Kind() != reflect.Slice {
			continue
		}
		out := reflect.MakeSlice(f.Type, rf.Len(), rf.Len())
		for j := 0; j < rf.Len(); j++ {
			entry := out.Index(j)
			if d, ok := entry.Addr().Interface().(interface{ Default() }); ok {
				d.Default()
			}
			src := rf.Index(j)
			if src.Kind() == reflect.Int32 {
				if p := entry.FieldByName("Partition"); p.IsValid() && p.Kind() == reflect.Int32 {
					p.SetInt(src.Int())
				}
				src = reflect.Value{}
			}
			setError(entry, code, msg)
			if src.IsValid() && src.Kind() == reflect.Struct {
				copyNames(entry, src)
				mirror(entry, src, code, msg)
			}
		}
		resp.Field(i).Set(out)
	}
}
