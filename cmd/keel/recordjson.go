package main

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/fsm"
)

// appendMessageJSON renders a metadata record as one line of JSON, for
// people and scripts alike, unlike protojson: every field in declaration
// order with its proto (snake_case) name, zero values included (partition
// 0 is a partition, epoch 0 an epoch); 64-bit numbers as JSON numbers, not
// strings; topic ids as the UUID text every other command prints; other
// bytes as base64; enums by name. A field with presence that is unset (a
// change record's "unchanged", an oneof member not chosen) is left out.
func appendMessageJSON(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = strconv.AppendQuote(b, string(fd.Name()))
		b = append(b, ':')
		if redactedFields[fd.FullName()] {
			b = append(b, `"(redacted)"`...)
			continue
		}
		b = appendFieldJSON(b, fd, m.Get(fd))
	}
	return append(b, '}')
}

// redactedFields are never shown, as Kafka's RecordRedactor hides them:
// what a SCRAM login is checked against.
var redactedFields = map[protoreflect.FullName]bool{
	"keel.v1.UserScramCredentialRecord.salt":       true,
	"keel.v1.UserScramCredentialRecord.stored_key": true,
	"keel.v1.UserScramCredentialRecord.server_key": true,
}

func appendFieldJSON(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch {
	case fd.IsList():
		l := v.List()
		b = append(b, '[')
		for i := range l.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValueJSON(b, fd, l.Get(i))
		}
		return append(b, ']')
	case fd.IsMap():
		m := v.Map()
		keys := make([]protoreflect.MapKey, 0, m.Len())
		m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return strings.Compare(a.String(), b.String()) })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k.String())
			b = append(b, ':')
			b = appendValueJSON(b, fd.MapValue(), m.Get(k))
		}
		return append(b, '}')
	}
	return appendValueJSON(b, fd, v)
}

// appendValueJSON renders one value of fd: a list's element, a map's value
// or a singular field.
func appendValueJSON(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return appendString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		raw := v.Bytes()
		if isTopicIDField(fd) && len(raw) == len(fsm.TopicID{}) {
			return appendString(b, fsm.TopicID(raw).String())
		}
		return appendString(b, base64.StdEncoding.EncodeToString(raw))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessageJSON(b, v.Message())
	}
	return append(b, "null"...)
}

// isTopicIDField reports whether fd holds a topic id: a bytes field named
// topic_id, as every record that refers to a topic names it.
func isTopicIDField(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.BytesKind && fd.Name() == "topic_id"
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
