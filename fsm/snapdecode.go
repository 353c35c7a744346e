package fsm

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// recordDecoder decodes snapshot records. Nearly all of a big snapshot is
// Partition records, and proto.Unmarshal makes six objects of each that a
// restore drops at once; so when no caller keeps the records (reuse), a
// frame that is exactly one Partition record is decoded by hand into one
// reused record, with no allocation. Anything else goes to proto.Unmarshal.
type recordDecoder struct {
	reuse bool
	part  keelpb.PartitionRecord
	rec   keelpb.Record
	wrap  keelpb.Record_Partition
}

// decode returns the record in payload. A reused record is valid until the
// next call.
func (d *recordDecoder) decode(payload []byte) (*keelpb.Record, error) {
	if d.reuse {
		if inner, ok := lonePartition(payload); ok && d.decodePartition(inner) {
			d.wrap.Partition = &d.part
			d.rec.Record = &d.wrap
			return &d.rec, nil
		}
	}
	rec := &keelpb.Record{}
	if err := proto.Unmarshal(payload, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// recordPartitionField is keelpb.Record's partition field number.
const recordPartitionField = 10

// lonePartition returns the PartitionRecord bytes of a Record payload that
// holds that field alone, once.
func lonePartition(b []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != recordPartitionField || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	return v, true
}

// decodePartition decodes a PartitionRecord into d.part, reusing its
// slices. It reports false, leaving the frame to proto.Unmarshal, for
// anything it does not expect: malformed bytes, unknown fields, or a known
// field in an unexpected wire type.
func (d *recordDecoder) decodePartition(b []byte) bool {
	p := &d.part
	p.TopicId, p.Replicas, p.Isr = p.TopicId[:0], p.Replicas[:0], p.Isr[:0]
	p.AddingReplicas, p.RemovingReplicas = p.AddingReplicas[:0], p.RemovingReplicas[:0]
	p.EligibleLeaderReplicas, p.LastKnownElr = p.EligibleLeaderReplicas[:0], p.LastKnownElr[:0]
	p.Partition, p.Leader, p.LeaderEpoch, p.PartitionEpoch = 0, 0, 0, 0
	p.LeaderRecoveryState = 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var list *[]int32
		var scalar *int32
		switch num {
		case 1:
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			p.TopicId = append(p.TopicId[:0], v...)
			b = b[n:]
			continue
		case 2:
			scalar = &p.Partition
		case 5:
			scalar = &p.Leader
		case 6:
			scalar = &p.LeaderEpoch
		case 7:
			scalar = &p.PartitionEpoch
		case 3:
			list = &p.Replicas
		case 4:
			list = &p.Isr
		case 8:
			list = &p.AddingReplicas
		case 9:
			list = &p.RemovingReplicas
		case 10:
			list = &p.EligibleLeaderReplicas
		case 11:
			list = &p.LastKnownElr
		case 12:
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			p.LeaderRecoveryState = keelpb.LeaderRecoveryState(int32(v))
			b = b[n:]
			continue
		default:
			return false
		}
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if scalar != nil {
				*scalar = int32(v)
			} else {
				*list = append(*list, int32(v))
			}
		case typ == protowire.BytesType && list != nil: // packed
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return false
				}
				*list = append(*list, int32(x))
				v = v[n:]
			}
		default:
			return false
		}
	}
	return true
}
