package broker

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// pushMessage receives one metadata push (Session's stream) from one copy
// of its bytes. proto.Unmarshal copies every bytes field, so a push cost
// two copies of its entries: gRPC's frames into one buffer, then each
// entry's data out of it. Creating a million partitions pushes about 40 MB
// of entries to every broker.
type pushMessage struct{ push *keelpb.MetadataPush }

var _ rpc.WireUnmarshaler = (*pushMessage)(nil)

// UnmarshalWire copies data once, into memory of its own that the decoded
// entries' data alias (the garbage collector frees it with the last entry).
func (m *pushMessage) UnmarshalWire(data mem.BufferSlice) error {
	return decodePush(data.Materialize(), m.push)
}

// decodePush decodes b into p as proto.Unmarshal does, but with the data of
// the entries, or of a snapshot chunk, aliasing b. A push with anything
// else in it (a field of a newer version, a body given twice) is decoded by
// proto.Unmarshal, so the result is always proto's.
func decodePush(b []byte, p *keelpb.MetadataPush) error {
	if decodePushFields(b, p) {
		return nil
	}
	proto.Reset(p)
	return proto.Unmarshal(b, p)
}

// The field numbers of MetadataPush, MetadataEntries, MetadataEntry and
// SnapshotChunk (proto/keelpb/controller.proto).
const (
	pushControllerEpoch protowire.Number = 1
	pushControllerID    protowire.Number = 2
	pushEntries         protowire.Number = 3
	pushSnapshot        protowire.Number = 4
	entriesEntry        protowire.Number = 1
	entryPrevOffset     protowire.Number = 1
	entryOffset         protowire.Number = 2
	entryTerm           protowire.Number = 3
	entryData           protowire.Number = 4
	chunkData           protowire.Number = 1
	chunkLast           protowire.Number = 2
)

// decodePushFields decodes the fields it knows; false if b holds any other,
// or is malformed.
func decodePushFields(b []byte, p *keelpb.MetadataPush) bool {
	hasBody := false
	return eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, body []byte) bool {
		switch {
		case num == pushControllerEpoch && typ == protowire.VarintType:
			p.ControllerEpoch = int64(v)
		case num == pushControllerID && typ == protowire.VarintType:
			p.ControllerId = int32(v)
		case num == pushEntries && typ == protowire.BytesType && !hasBody:
			hasBody = true
			entries, ok := decodeEntries(body)
			p.Body = &keelpb.MetadataPush_Entries{Entries: entries}
			return ok
		case num == pushSnapshot && typ == protowire.BytesType && !hasBody:
			hasBody = true
			c := &keelpb.SnapshotChunk{}
			p.Body = &keelpb.MetadataPush_Snapshot{Snapshot: c}
			return eachField(body, func(num protowire.Number, typ protowire.Type, v uint64, body []byte) bool {
				switch {
				case num == chunkData && typ == protowire.BytesType:
					c.Data = aliased(body)
				case num == chunkLast && typ == protowire.VarintType:
					c.Last = v != 0
				default:
					return false
				}
				return true
			})
		default:
			return false
		}
		return true
	})
}

// decodeEntries decodes a MetadataEntries, its entries in one allocation.
func decodeEntries(b []byte) (*keelpb.MetadataEntries, bool) {
	n := 0
	if !eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, _ []byte) bool {
		n++
		return num == entriesEntry && typ == protowire.BytesType
	}) {
		return nil, false
	}
	all := make([]keelpb.MetadataEntry, n)
	msg := &keelpb.MetadataEntries{Entries: make([]*keelpb.MetadataEntry, n)}
	i := 0
	return msg, eachField(b, func(_ protowire.Number, _ protowire.Type, _ uint64, body []byte) bool {
		e := &all[i]
		msg.Entries[i] = e
		i++
		return eachField(body, func(num protowire.Number, typ protowire.Type, v uint64, body []byte) bool {
			switch {
			case num == entryPrevOffset && typ == protowire.VarintType:
				e.PrevOffset = v
			case num == entryOffset && typ == protowire.VarintType:
				e.Offset = v
			case num == entryTerm && typ == protowire.VarintType:
				e.Term = v
			case num == entryData && typ == protowire.BytesType:
				e.Data = aliased(body)
			default:
				return false
			}
			return true
		})
	})
}

// eachField calls fn with each field of b: its varint value or its bytes,
// by wire type (other wire types are passed with neither). It stops at
// fn's false, and returns false then or if b is malformed.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, body []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var (
			v    uint64
			body []byte
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			body, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 || !fn(num, typ, v, body) {
			return false
		}
		b = b[n:]
	}
	return true
}

// aliased is b as proto decodes a bytes field: nil when empty. Its capacity
// ends with it, so an append to it cannot write over the next field.
func aliased(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b[:len(b):len(b)]
}
