package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUnservedResponse_EveryKey: every API kmsg knows and Keel does not
// serve, at every version kmsg knows, gets a response that encodes and
// decodes at that version, with UNSUPPORTED_VERSION where it has a
// top-level error code.
func TestUnservedResponse_EveryKey(t *testing.T) {
	n := 0
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		if _, served := versions[key]; served && !groupKeys[key] {
			continue
		}
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			var body []byte
			if req.IsFlexible() {
				body = append(body, 0) // the header's tags
			}
			body = req.AppendTo(body)
			_, resp, err := unservedResponse(key, v, body)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			back := req.ResponseKind()
			back.SetVersion(v)
			if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
				t.Fatalf("%s v%d: the response does not decode: %v", kmsg.NameForKey(key), v, err)
			}
			if ec, ok := topLevelErrorCode(back); ok && v > 0 && ec != kerr.UnsupportedVersion.Code {
				t.Errorf("%s v%d: top-level error %d", kmsg.NameForKey(key), v, ec)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no unserved API tried")
	}
}

// topLevelErrorCode reads the ErrorCode of the responses that have one
// at every version (the test's sample; others carry it per entry).
func topLevelErrorCode(r kmsg.Response) (int16, bool) {
	switch r := r.(type) {
	case *kmsg.EndTxnResponse:
		return r.ErrorCode, true
	case *kmsg.ConsumerGroupHeartbeatResponse:
		return r.ErrorCode, true
	case *kmsg.JoinGroupResponse:
		return r.ErrorCode, true
	case *kmsg.ShareGroupHeartbeatResponse:
		return r.ErrorCode, true
	}
	return 0, false
}
