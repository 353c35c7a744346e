package group

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The versions this coordinator writes: Kafka 3.x's, so that Kafka's tools
// (kafka-console-consumer's OffsetsMessageFormatter, kadm) read the topic.
const (
	offsetKeyVersion   = 1
	offsetValueVersion = 3
	groupKeyVersion    = 2
	groupValueVersion  = 3
)

// offsetKey is an OffsetCommitKey record key.
func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

// offsetValue is an OffsetCommitValue record value.
func offsetValue(o offset) []byte {
	v := kmsg.NewOffsetCommitValue()
	v.Version = offsetValueVersion
	v.Offset = o.offset
	v.LeaderEpoch = o.leaderEpoch
	v.Metadata = o.metadata
	v.CommitTimestamp = o.commitMillis
	return v.AppendTo(nil)
}

// groupKey is a GroupMetadataKey record key.
func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

// decoded is one __consumer_offsets record, decoded: an offset commit or a
// group's metadata, either one possibly a tombstone (nil value).
type decoded struct {
	group string
	// An offset commit's.
	isOffset bool
	tp       topicPartition
	offset   *offset
	// A group's metadata.
	meta *kmsg.GroupMetadataValue
}

// decodeRecord decodes r. Records of key versions this coordinator does not
// know (Kafka's KIP-848 and transaction records, versions 3 and up) are
// skipped (ok false), as a classic coordinator reading a newer log would
// have to; a record it knows but cannot parse is an error.
func decodeRecord(r Record) (d decoded, ok bool, err error) {
	if len(r.Key) < 2 {
		return d, false, fmt.Errorf("record key of %d bytes", len(r.Key))
	}
	switch v := int16(binary.BigEndian.Uint16(r.Key)); v {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(r.Key); err != nil {
			return d, false, fmt.Errorf("offset commit key: %w", err)
		}
		d = decoded{group: k.Group, isOffset: true, tp: topicPartition{k.Topic, k.Partition}}
		if r.Value == nil {
			return d, true, nil
		}
		var val kmsg.OffsetCommitValue
		if err := val.ReadFrom(r.Value); err != nil {
			return d, false, fmt.Errorf("offset commit value of %s %s/%d: %w", k.Group, k.Topic, k.Partition, err)
		}
		epoch := val.LeaderEpoch
		if val.Version < 3 {
			epoch = -1
		}
		d.offset = &offset{offset: val.Offset, leaderEpoch: epoch, metadata: val.Metadata, commitMillis: val.CommitTimestamp}
		return d, true, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(r.Key); err != nil {
			return d, false, fmt.Errorf("group metadata key: %w", err)
		}
		d = decoded{group: k.Group}
		if r.Value == nil {
			return d, true, nil
		}
		val := kmsg.NewGroupMetadataValue()
		if err := val.ReadFrom(r.Value); err != nil {
			return d, false, fmt.Errorf("group metadata value of %s: %w", k.Group, err)
		}
		d.meta = &val
		return d, true, nil
	default:
		return d, false, nil
	}
}
