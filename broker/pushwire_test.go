package broker

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

func wirePush(entries ...*keelpb.MetadataEntry) *keelpb.MetadataPush {
	return &keelpb.MetadataPush{ControllerEpoch: 3, ControllerId: 2,
		Body: &keelpb.MetadataPush_Entries{Entries: &keelpb.MetadataEntries{Entries: entries}}}
}

func marshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// within reports whether s lies inside b's memory.
func within(s, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(&b[0]))
	return p >= lo && p < lo+uintptr(len(b))
}

// TestDecodePush: whatever the bytes, decodePush gives what proto.Unmarshal
// gives; the entries' and chunks' data alias the bytes when only the known
// fields are there.
func TestDecodePush(t *testing.T) {
	data := bytes.Repeat([]byte{1, 2, 3}, 1000)
	entries := wirePush(
		&keelpb.MetadataEntry{PrevOffset: 4, Offset: 7, Term: 2, Data: data},
		&keelpb.MetadataEntry{PrevOffset: 7, Offset: 9, Term: 2, Data: []byte{1}},
	)
	// unknown appends field 15 (a field of a newer version) to b.
	unknown := func(b []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, 15, protowire.VarintType), 1)
	}
	entryWithUnknown := unknown(marshal(t, &keelpb.MetadataEntry{Offset: 5, Data: data}))
	tests := []struct {
		name      string
		wire      []byte
		wantAlias bool // the data of every entry or chunk aliases wire
	}{
		{name: "entries", wire: marshal(t, entries), wantAlias: true},
		{name: "no entries", wire: marshal(t, wirePush())},
		{name: "empty entry data", wire: marshal(t, wirePush(&keelpb.MetadataEntry{PrevOffset: 1, Offset: 2}))},
		{name: "negative controller id", wire: marshal(t, &keelpb.MetadataPush{ControllerEpoch: -1, ControllerId: -1})},
		{name: "snapshot chunk", wire: marshal(t, &keelpb.MetadataPush{ControllerEpoch: 1,
			Body: &keelpb.MetadataPush_Snapshot{Snapshot: &keelpb.SnapshotChunk{Data: data, Last: true}}}), wantAlias: true},
		{name: "empty", wire: nil},
		{name: "unknown field in the push", wire: unknown(marshal(t, entries))},
		{name: "unknown field in an entry", wire: protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entryWithUnknown))},
		// proto merges a message field given twice: the entries of both.
		{name: "body twice", wire: append(marshal(t, entries), marshal(t, entries)...)},
		{name: "entries then snapshot", wire: append(marshal(t, entries), marshal(t, &keelpb.MetadataPush{
			Body: &keelpb.MetadataPush_Snapshot{Snapshot: &keelpb.SnapshotChunk{Data: data}}})...)},
		{name: "controller id as bytes", wire: protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := &keelpb.MetadataPush{}
			wantErr := proto.Unmarshal(tt.wire, want)
			got := &keelpb.MetadataPush{}
			err := decodePush(tt.wire, got)
			if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(got, want)) {
				t.Fatalf("decodePush = %v, %v; proto.Unmarshal = %v, %v", got, err, want, wantErr)
			}
			var datas [][]byte
			for _, e := range got.GetEntries().GetEntries() {
				datas = append(datas, e.Data)
			}
			if c := got.GetSnapshot(); c != nil {
				datas = append(datas, c.Data)
			}
			for _, d := range datas {
				if len(d) > 0 && within(d, tt.wire) != tt.wantAlias {
					t.Errorf("data of %d bytes aliases the wire: %v, want %v", len(d), !tt.wantAlias, tt.wantAlias)
				}
				if tt.wantAlias && cap(d) != len(d) {
					t.Errorf("data of %d bytes has capacity %d: an append would write over the wire", len(d), cap(d))
				}
			}
		})
	}
	// Truncated anywhere, the bytes are malformed or a shorter push: never
	// a panic, and proto's answer.
	wire := marshal(t, entries)
	for n := range len(wire) {
		want, got := &keelpb.MetadataPush{}, &keelpb.MetadataPush{}
		wantErr, err := proto.Unmarshal(wire[:n], want), decodePush(wire[:n], got)
		if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(got, want)) {
			t.Fatalf("truncated at %d: decodePush = %v, %v; proto.Unmarshal = %v, %v", n, got, err, want, wantErr)
		}
	}
}

// BenchmarkDecodePush decodes a push of ten 100 KiB entries: proto's copy
// of every entry's data against decodePush's aliases.
func BenchmarkDecodePush(b *testing.B) {
	var entries []*keelpb.MetadataEntry
	for i := range uint64(10) {
		entries = append(entries, &keelpb.MetadataEntry{PrevOffset: i, Offset: i + 1, Term: 1, Data: bytes.Repeat([]byte{byte(i)}, 100<<10)})
	}
	wire := marshal(b, wirePush(entries...))
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for range b.N {
			if err := proto.Unmarshal(wire, &keelpb.MetadataPush{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("aliased", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for range b.N {
			if err := decodePush(wire, &keelpb.MetadataPush{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
