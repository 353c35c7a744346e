package partlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// spec describes a test batch. The zero value is one record of 16 bytes
// from a producer that is not idempotent.
type spec struct {
	records int   // 1 if 0
	value   int   // bytes per record value; 16 if 0
	pid     int64 // 0: not idempotent
	pepoch  int16
	seq     int32
	ts      int64 // base timestamp; maxTimestamp is ts + records - 1
	base    int64 // base offset (what a client sends is 0)
	epoch   int32 // partition leader epoch
}

// makeBatch builds a v2 record batch with kmsg, as a Kafka client would,
// with a good CRC-32C.
func makeBatch(t testing.TB, s spec) []byte {
	t.Helper()
	if s.records == 0 {
		s.records = 1
	}
	if s.value == 0 {
		s.value = 16
	}
	var recs []byte
	for i := 0; i < s.records; i++ {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, s.value)
		r := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Key: []byte("k"), Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // everything after a one-byte varint 0
		recs = r.AppendTo(recs)
	}
	pid, seq := int64(NoProducerID), int32(-1)
	pepoch := int16(-1)
	if s.pid != 0 {
		pid, seq, pepoch = s.pid, s.seq, s.pepoch
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          s.base,
		Length:               int32(minBatchLength + len(recs)),
		PartitionLeaderEpoch: s.epoch,
		Magic:                2,
		LastOffsetDelta:      int32(s.records - 1),
		FirstTimestamp:       s.ts,
		MaxTimestamp:         s.ts + int64(s.records-1),
		ProducerID:           pid,
		ProducerEpoch:        pepoch,
		FirstSequence:        seq,
		NumRecords:           int32(s.records),
		Records:              recs,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttrs:], castagnoli))
	return b
}

// testLogger collects what the log logs.
type testLogger struct{ buf bytes.Buffer }

func (tl *testLogger) logger() *slog.Logger { return slog.New(slog.NewTextHandler(&tl.buf, nil)) }

func openLog(t testing.TB, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// crash closes the log's files without the flush and checkpoints of Close:
// what kill -9 leaves (everything written is in the page cache).
func crash(l *Log) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.rw.Lock()
	defer l.rw.Unlock()
	l.closed = true
	for _, s := range l.segs {
		_ = s.close()
	}
}

func mustAppend(t testing.TB, l *Log, s spec, leaderEpoch int32) AppendInfo {
	t.Helper()
	info, err := l.Append(makeBatch(t, s), leaderEpoch)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return info
}

// readAll reads the log from its start to its end and returns the batches'
// headers, checking each batch whole and its CRC good.
func readAll(t testing.TB, l *Log) []BatchHeader {
	t.Helper()
	var out []BatchHeader
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		res, err := l.Read(off, 64<<10)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		_, hs, err := splitBatches(res.Records)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(hs) == 0 {
			t.Fatalf("Read(%d) returned nothing below the log end %d", off, l.LogEndOffset())
		}
		out = append(out, hs...)
		off = hs[len(hs)-1].NextOffset()
	}
	return out
}

func segPath(dir string, base int64) string { return filepath.Join(dir, segmentName(base, logSuffix)) }

// corrupt XORs the byte at pos of a file.
func corrupt(t testing.TB, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", target)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %q is not %v", err, target)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not say %q", err, contains)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q is more than one line", err)
	}
}

func putCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttrs:], castagnoli))
}

func errorsJoin(errs ...error) error { return errors.Join(errs...) }
