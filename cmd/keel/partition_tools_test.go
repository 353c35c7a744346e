package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/partlog"
)

// TestTopicSpecs_Arguments: TOPIC[:PARTITION,...] as arguments, as
// group reset-offsets' --topic takes them, and which partitions they keep.
func TestTopicSpecs_Arguments(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		want    string
		wantErr string
	}{
		{nil, "map[]", ""},
		{[]string{"orders"}, "map[orders:[]]", ""},
		{[]string{"orders:0,2", "audit"}, "map[audit:[] orders:[0 2]]", ""},
		{[]string{"orders:1", "orders:1,3"}, "map[orders:[1 3]]", ""},
		{[]string{"orders", "orders:1"}, "map[orders:[]]", ""},
		{[]string{":1"}, "", `":1": want TOPIC or TOPIC:PARTITION`},
		{[]string{"orders:x"}, "", `"orders:x": partition "x" is not a partition number`},
		{[]string{"orders:-1"}, "", `"orders:-1": partition "-1" is not a partition number`},
	} {
		got, err := parseTopicList("", tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseTopicList(%q): %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tt.want {
			t.Errorf("parseTopicList(%q) = %v, %v; want %s", tt.args, got, err, tt.want)
		}
	}
	sel, _ := parseTopicList("", []string{"orders:1", "audit"})
	for _, tt := range []struct {
		topic string
		p     int32
		want  bool
	}{{"orders", 1, true}, {"orders", 0, false}, {"audit", 7, true}, {"other", 0, false}} {
		if got := sel.keeps(tt.topic, tt.p); got != tt.want {
			t.Errorf("keeps(%s, %d) = %t, want %t", tt.topic, tt.p, got, tt.want)
		}
	}
	if !(topicSpecs{}).keeps("any", 3) {
		t.Error("an empty selection keeps every partition")
	}
	err := sel.missing(func(topic string) (map[int32]bool, error) {
		if topic == "audit" {
			return map[int32]bool{0: true}, nil
		}
		return map[int32]bool{0: true}, nil
	})
	if err == nil || err.Error() != "topic orders has no partition 1 (it has 1)" {
		t.Errorf("missing: %v", err)
	}
}

// TestPartialOffsets: a shard of a listing that failed (its leader did not
// answer) marks its partitions with its error; the others' offsets stay,
// and the command's error counts the failed rows.
func TestPartialOffsets(t *testing.T) {
	failed := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "orders"
	for _, p := range []int32{1, 2} {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rt.Partitions = append(rt.Partitions, rp)
	}
	failed.Topics = append(failed.Topics, rt)
	down := errors.New("broker 3 did not answer")
	listed := kadm.ListedOffsets{"orders": {0: {Topic: "orders", Partition: 0, Offset: 7}}}
	got, err := partialOffsets(listed, &kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{{Req: failed, Err: down}}})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	got.Each(func(o kadm.ListedOffset) {
		rows = append(rows, fmt.Sprintf("%s/%d:%d:%v", o.Topic, o.Partition, o.Offset, o.Err))
	})
	sort.Strings(rows)
	if want := "[orders/0:7:<nil> orders/1:-1:broker 3 did not answer orders/2:-1:broker 3 did not answer]"; fmt.Sprint(rows) != want {
		t.Errorf("partialOffsets: %v, want %s", rows, want)
	}
	if _, err := partialOffsets(nil, down); err != down {
		t.Errorf("partialOffsets of another error: %v, want it as it is", err)
	}
	err = rowErrors([]offsetsRow{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1, Error: down.Error()}, {Topic: "orders", Partition: 2, Error: "other"}})
	if err == nil || err.Error() != "2 of 3 partitions did not answer (the first: orders/1: broker 3 did not answer)" {
		t.Errorf("rowErrors: %v", err)
	}
}

// TestParseOffsetTime: --time as kafka-get-offsets takes it.
func TestParseOffsetTime(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"-1", -1, true}, {"-2", -2, true}, {"-3", -3, true}, {"latest", -1, true}, {"earliest", -2, true},
		{"max-timestamp", -3, true}, {"1765000000000", 1765000000000, true}, {"0", 0, true},
		{"-4", 0, false}, {"yesterday", 0, false}, {"", 0, false},
	} {
		got, err := parseOffsetTime(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseOffsetTime(%q) = %d, %v; want %d, ok %t", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// TestShellSource: the command line wins over KEEL_* variables, so that an
// exported KEEL_CONTROLLERS does not stand in the way of --data-dir.
func TestShellSource(t *testing.T) {
	env := map[string]string{"KEEL_CONTROLLERS": "c:9093"}
	getenv := func(k string) string { return env[k] }
	for _, tt := range []struct {
		name   string
		values map[string]string
		want   string // "": refused
	}{
		{"None", map[string]string{}, ""},
		{"DataDir", map[string]string{"data-dir": "/d"}, "data-dir"},
		{"ControllersFromEnv", map[string]string{"controllers": "c:9093"}, "controllers"},
		{"DataDirOverEnvControllers", map[string]string{"data-dir": "/d", "controllers": "c:9093"}, "data-dir"},
		{"TypedControllers", map[string]string{"controllers": "other:9093"}, "controllers"},
		{"TwoTyped", map[string]string{"snapshot": "s", "controllers": "other:9093"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shellSource(tt.values, getenv)
			if got != tt.want || (tt.want == "") != (err != nil) {
				t.Errorf("shellSource = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// segmentBytes is a segment of one batch of records (key, value) from
// an idempotent producer, at base.
func segmentBytes(t *testing.T, base int64, kvs ...string) []byte {
	t.Helper()
	var recs []byte
	for i := 0; i < len(kvs); i += 2 {
		r := kmsg.Record{TimestampDelta64: int64(i / 2), OffsetDelta: int32(i / 2), Key: []byte(kvs[i]), Value: []byte(kvs[i+1]),
			Headers: []kmsg.Header{{Key: "trace", Value: []byte("x")}}}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	n := len(kvs) / 2
	rb := kmsg.RecordBatch{FirstOffset: base, Length: int32(49 + len(recs)), PartitionLeaderEpoch: 4, Magic: 2,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: 1000, MaxTimestamp: 1000 + int64(n-1), ProducerID: 9, ProducerEpoch: 1,
		FirstSequence: 20, NumRecords: int32(n), Records: recs}
	b := rb.AppendTo(nil)
	rb.CRC = int32(crc32c(b[21:]))
	return rb.AppendTo(nil)
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// TestDumpFile: the lines kafka-dump-log prints, for a good segment and
// with --print-records; a segment cut short prints what precedes the cut
// and fails naming the position; a name that is not a segment's is
// refused; an index is checked against its log.
func TestDumpFile(t *testing.T) {
	dir := t.TempDir()
	seg := append(segmentBytes(t, 0, "k0", "v0", "k1", "v1"), segmentBytes(t, 2, "k2", "v2")...)
	log := filepath.Join(dir, "00000000000000000000.log")
	if err := os.WriteFile(log, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := dumpFile(&b, log, true); err != nil {
		t.Fatal(err)
	}
	second := len(segmentBytes(t, 0, "k0", "v0", "k1", "v1"))
	for _, want := range []string{
		"Dumping " + log + "\nLog starting offset: 0\n",
		"baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 20 lastSequence: 21 producerId: 9 producerEpoch: 1 partitionLeaderEpoch: 4 isTransactional: false isControl: false position: 0 CreateTime: 1001 size: ",
		"magic: 2 compresscodec: none crc: ",
		"| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 20 headerKeys: [trace] key: k0 payload: v0\n",
		"| offset: 1 CreateTime: 1001 keySize: 2 valueSize: 2 sequence: 21 headerKeys: [trace] key: k1 payload: v1\n",
		fmt.Sprintf("baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 20 lastSequence: 20 producerId: 9 producerEpoch: 1 partitionLeaderEpoch: 4 isTransactional: false isControl: false position: %d ", second),
		"| offset: 2 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 20 headerKeys: [trace] key: k2 payload: v2\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("dump: want %q in:\n%s", want, b.String())
		}
	}
	if strings.Count(b.String(), "isvalid: true") != 2 {
		t.Errorf("dump: want 2 valid batches:\n%s", b.String())
	}

	// Cut short: the first batch, then the damage named.
	if err := os.WriteFile(log, seg[:len(seg)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	err := dumpFile(&b, log, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("position %d: a batch of", second)) || strings.Count(b.String(), "isvalid: true") != 1 {
		t.Errorf("dump of a cut segment: %v\n%s", err, b.String())
	}

	// An index of one entry naming the second batch, then a wrong one.
	idx := filepath.Join(dir, "00000000000000000000.index")
	entry := func(rel, pos int) []byte {
		return []byte{0, 0, 0, byte(rel), 0, 0, byte(pos >> 8), byte(pos)}
	}
	if err := os.WriteFile(log, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, entry(2, second), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := dumpFile(&b, idx, false); err != nil || !strings.Contains(b.String(), fmt.Sprintf("offset: 2 position: %d\n1 entries", second)) {
		t.Errorf("dump of an index: %v\n%s", err, b.String())
	}
	if err := os.WriteFile(idx, entry(1, second), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dumpFile(&b, idx, false); err == nil || !strings.Contains(err.Error(), "does not name a batch") {
		t.Errorf("dump of a wrong index: %v", err)
	}

	if err := dumpFile(&b, filepath.Join(dir, "leader-epoch-checkpoint"), false); err == nil || !strings.Contains(err.Error(), "not a segment file") {
		t.Errorf("dump of a checkpoint: %v", err)
	}
	if _, _, ok := partlog.SegmentBase("00000000000000000000.log"); !ok {
		t.Error("SegmentBase refuses a segment's name")
	}
}
