package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Snapshot stream layout, written and read in one pass with no whole-image
// buffer:
//
//	"KEELSNAP"                       8-byte magic
//	frame('H', SnapshotHeader)       format version, cluster id, index, term, epoch
//	frame('R', Record) ...           the image as records, in a fixed order
//	frame('T', SnapshotTrailer)      record count and SHA-256 of every byte before it
//
// where frame(kind, msg) is the kind byte, the uvarint length, and msg's
// deterministic protobuf encoding. Equal images give equal bytes.
const (
	snapshotMagic = "KEELSNAP"
	// SnapshotFormatVersion is written in every header. Readers take every
	// version from MinSnapshotFormatVersion up to it and refuse others, so
	// a snapshot an older reader would misread is refused by it instead.
	// Version 2 added cluster-default ConfigRecords (and their count in the
	// header) and the partitions' eligible leader replicas, last known
	// leader and leader recovery state, which a version 1 reader would
	// drop unseen. Version 3 added the next free producer id (a
	// ProducerIdsRecord) and the brokers' Kafka addresses. Record types
	// added since are gated by metadata.version instead (features.go): a
	// snapshot holds only what its level allows, and its header states
	// the level, so the format need not change with them.
	SnapshotFormatVersion = 3
	// MinSnapshotFormatVersion is the oldest version this reader takes.
	MinSnapshotFormatVersion = 1

	frameHeader  = 'H'
	frameRecord  = 'R'
	frameTrailer = 'T'

	// maxFrameSize bounds one frame so a corrupt length cannot make the
	// reader allocate without limit.
	maxFrameSize = 64 << 20
)

// ErrCorruptSnapshot is wrapped by every error that comes from the bytes of a
// snapshot (as opposed to the reader failing).
var ErrCorruptSnapshot = errors.New("corrupt snapshot")

// identityRecords counts the records imageRecords writes besides the
// brokers, topics, partitions and the cluster's configs.
func identityRecords(img *Image) int {
	n := 0
	for _, present := range []bool{img.ClusterID != "", img.MetadataVersion > 0, img.ControllerEpoch > 0, img.NextProducerID > 0} {
		if present {
			n++
		}
	}
	return n + len(img.controllers) + len(img.scram) + clientQuotaRecordCount(img) + img.ACLCount()
}

// imageRecords lists the image as records, in an order that depends only on
// the image. Replaying them in restore mode rebuilds it. A record passed to
// emit is only valid until emit returns.
func imageRecords(img *Image, emit func(*keelpb.Record) error) error {
	if img.ClusterID != "" {
		if err := emit(&keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: img.ClusterID}}}); err != nil {
			return err
		}
	}
	if img.MetadataVersion > 0 {
		rec := &keelpb.FeatureLevelRecord{Name: MetadataVersionFeature, Level: img.MetadataVersion}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: rec}}); err != nil {
			return err
		}
	}
	if img.ControllerEpoch > 0 {
		rec := &keelpb.ControllerEpochRecord{Epoch: img.ControllerEpoch, LeaderId: img.ControllerLeaderID}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: rec}}); err != nil {
			return err
		}
	}
	if img.NextProducerID > 0 {
		rec := &keelpb.ProducerIdsRecord{BrokerId: -1, BrokerEpoch: -1, NextProducerId: img.NextProducerID}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_ProducerIds{ProducerIds: rec}}); err != nil {
			return err
		}
	}
	// The controller registrations, after the level that allows them.
	if err := controllerRecords(img, emit); err != nil {
		return err
	}
	// The SCRAM credentials, after the level that allows them.
	if err := scramRecords(img, emit); err != nil {
		return err
	}
	// The ACLs, likewise after the level.
	if err := aclRecords(img, emit); err != nil {
		return err
	}
	// The cluster's config defaults, by name. Topics' own configs travel
	// in their TopicRecords.
	if err := configRecords(img, emit); err != nil {
		return err
	}
	// The client quotas, after the level that allows them.
	if err := clientQuotaRecords(img, emit); err != nil {
		return err
	}
	for _, b := range img.Brokers() {
		rec := &keelpb.BrokerRegistrationRecord{
			BrokerId:           b.ID,
			IncarnationId:      b.IncarnationID,
			Address:            b.Address,
			KafkaAddress:       b.KafkaAddress,
			Rack:               b.Rack,
			MinMetadataVersion: b.MinMetadataVersion,
			MaxMetadataVersion: b.MaxMetadataVersion,
			BrokerEpoch:        b.Epoch,
			Fenced:             b.Fenced,
			ShuttingDown:       b.ShuttingDown,
		}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: rec}}); err != nil {
			return err
		}
	}
	// Topics by id, each followed by its partitions in order, so a restore
	// meets every partition's topic first and partitions densely numbered.
	var err error
	img.topicsByID.each(func(_ TopicID, e topicEntry) bool {
		t := e.topic
		rec := &keelpb.TopicRecord{Name: t.Name, TopicId: bytes.Clone(t.ID[:]), Configs: t.Configs}
		if err = emit(&keelpb.Record{Record: &keelpb.Record_Topic{Topic: rec}}); err != nil {
			return false
		}
		// emit is done with a record when it returns (the writer encodes
		// it at once), so one record serves every partition, and it may
		// point into the partition, which it never modifies.
		prec := &keelpb.PartitionRecord{}
		precord := &keelpb.Record{Record: &keelpb.Record_Partition{Partition: prec}}
		return vecEach(e.parts, int(t.Partitions), func(p *Partition) bool {
			prec.TopicId, prec.Partition = p.TopicID[:], p.Partition
			prec.Replicas, prec.Isr, prec.Leader = p.Replicas, p.ISR, p.Leader
			prec.LeaderEpoch, prec.PartitionEpoch = p.LeaderEpoch, p.PartitionEpoch
			prec.AddingReplicas, prec.RemovingReplicas = p.AddingReplicas, p.RemovingReplicas
			prec.EligibleLeaderReplicas, prec.LastKnownElr = p.ELR(), p.LastKnownELR()
			prec.LeaderRecoveryState = p.LeaderRecoveryState
			err = emit(precord)
			return err == nil
		})
	})
	return err
}

type frameWriter struct {
	w       *bufio.Writer
	scratch []byte
}

func (fw *frameWriter) frame(kind byte, m proto.Message) error {
	var err error
	fw.scratch = fw.scratch[:0]
	fw.scratch = append(fw.scratch, kind)
	fw.scratch = binary.AppendUvarint(fw.scratch, uint64(marshal.Size(m)))
	if fw.scratch, err = marshal.MarshalAppend(fw.scratch, m); err != nil {
		return err
	}
	_, err = fw.w.Write(fw.scratch)
	return err
}

// WriteSnapshot streams img to w in the snapshot format.
func WriteSnapshot(w io.Writer, img *Image) error { return writeSnapshot(w, img, nil) }

// writeSnapshot is WriteSnapshot with the header's digest and divergence
// fields taken from extra (a raft snapshot's: FSM.Snapshot).
func writeSnapshot(w io.Writer, img *Image, extra *keelpb.SnapshotHeader) error {
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	fw := &frameWriter{w: bw}
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	header := &keelpb.SnapshotHeader{
		FormatVersion:   SnapshotFormatVersion,
		ClusterId:       img.ClusterID,
		Index:           img.Offset,
		Term:            img.Term,
		ControllerEpoch: img.ControllerEpoch,
		Brokers:         uint64(img.BrokerCount()),
		Topics:          uint64(img.TopicCount()),
		Partitions:      uint64(img.PartitionCount()),
		Configs:         uint64(len(img.clusterConfigs)),
		MetadataVersion: img.MetadataVersion,
		RecordCount:     uint64(img.BrokerCount() + img.TopicCount() + img.PartitionCount() + len(img.clusterConfigs) + identityRecords(img)),
	}
	if extra != nil {
		header.DigestStart, header.DigestIndex, header.Digest = extra.DigestStart, extra.DigestIndex, extra.Digest
		header.DivergedIndex, header.DivergedReason = extra.DivergedIndex, extra.DivergedReason
	}
	if err := fw.frame(frameHeader, header); err != nil {
		return err
	}
	var count uint64
	err := imageRecords(img, func(rec *keelpb.Record) error {
		count++
		return fw.frame(frameRecord, rec)
	})
	if err != nil {
		return err
	}
	// The trailer is not part of what it sums: flush everything before it
	// through the hash first, then write it to w alone.
	if err := bw.Flush(); err != nil {
		return err
	}
	trailer := &keelpb.SnapshotTrailer{RecordCount: count, Sha256: sum.Sum(nil)}
	tw := bufio.NewWriter(w)
	if err := (&frameWriter{w: tw}).frame(frameTrailer, trailer); err != nil {
		return err
	}
	return tw.Flush()
}

type frameReader struct {
	r   *bufio.Reader
	sum hash.Hash
	// buf is reused for every frame's payload: protobuf decoding copies
	// what it keeps, so nothing aliases it after the frame is decoded.
	buf []byte
	// head holds a frame's kind and length for the sum.
	head [1 + binary.MaxVarintLen64]byte
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}

// next reads one frame. Frames other than the trailer are added to the sum.
// The payload is valid until the next call.
func (fr *frameReader) next() (kind byte, payload []byte, err error) {
	kind, err = fr.r.ReadByte()
	if err == io.EOF {
		return 0, nil, corrupt("truncated: no trailer")
	}
	if err != nil {
		return 0, nil, err
	}
	size, err := binary.ReadUvarint(fr.r)
	if err != nil {
		return 0, nil, corrupt("truncated frame length")
	}
	if size > maxFrameSize {
		return 0, nil, corrupt("frame of %d bytes exceeds the %d-byte limit", size, maxFrameSize)
	}
	if uint64(cap(fr.buf)) < size {
		fr.buf = make([]byte, size)
	}
	payload = fr.buf[:size]
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		return 0, nil, corrupt("truncated frame")
	}
	if kind != frameTrailer {
		fr.head[0] = kind
		fr.sum.Write(binary.AppendUvarint(fr.head[:1], size))
		fr.sum.Write(payload)
	}
	return kind, payload, nil
}

// SnapshotInfo describes a verified snapshot: its header, what its records
// hold, and its checksum.
type SnapshotInfo struct {
	FormatVersion uint32
	// MetadataVersion is the level the header states; 0 from a snapshot
	// written before the header carried it.
	MetadataVersion uint32
	ClusterID       string
	Index, Term     uint64
	ControllerEpoch int64
	Records         uint64
	Brokers         int
	Topics          int
	Partitions      int
	// Configs counts the cluster's config defaults.
	Configs int
	// SHA256 is the checksum the trailer carries, of every byte before it.
	SHA256 []byte
	// Digest is the writer's digest chain as of the image (a raft
	// snapshot's; nil when it carries none), and Diverged why the writer
	// no longer acted on the image (nil: it did).
	Digest   *Digest
	Diverged *Divergence
}

// ReadSnapshot reads a snapshot written by WriteSnapshot and rebuilds its
// image. It verifies the magic, the format version, every record, the record
// count and the checksum, and that nothing follows the trailer.
func ReadSnapshot(r io.Reader) (*Image, error) {
	img, _, err := readSnapshot(r, nil)
	return img, err
}

// ScanSnapshot reads and verifies a snapshot as ReadSnapshot does, calling
// fn (if not nil) with each record in order, and returns what it holds.
func ScanSnapshot(r io.Reader, fn func(*keelpb.Record) error) (*SnapshotInfo, error) {
	_, info, err := readSnapshot(r, fn)
	return info, err
}

// ReadSnapshotInfo is ReadSnapshot that also returns what the snapshot holds,
// in the same single pass.
func ReadSnapshotInfo(r io.Reader) (*Image, *SnapshotInfo, error) {
	return readSnapshot(r, nil)
}

// VerifySnapshot checks a snapshot's framing, header, record encoding,
// record count and checksum without rebuilding its image: a quick check of
// a file before it is used. Its SnapshotInfo has no counts of brokers,
// topics or partitions beyond what the record types tell.
func VerifySnapshot(r io.Reader) (*SnapshotInfo, error) {
	_, info, err := scanFrames(r, nil, false)
	return info, err
}

// ReadSnapshotHeader reads only the start of a snapshot stream, its magic
// and header (format version, cluster id, index, term, epoch), for a reader
// that wants to know what a snapshot is before (or without) reading it all.
// Nothing after the header is read or checked.
func ReadSnapshotHeader(r io.Reader) (*keelpb.SnapshotHeader, error) {
	return readHeader(&frameReader{r: bufio.NewReader(r), sum: sha256.New()})
}

// readHeader reads the magic and the header frame, adding both to fr's sum.
func readHeader(fr *frameReader) (*keelpb.SnapshotHeader, error) {
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(fr.r, magic); err != nil || string(magic) != snapshotMagic {
		return nil, corrupt("not a Keel snapshot (bad magic)")
	}
	fr.sum.Write(magic)

	kind, payload, err := fr.next()
	if err != nil {
		return nil, err
	}
	header := &keelpb.SnapshotHeader{}
	if kind != frameHeader || proto.Unmarshal(payload, header) != nil {
		return nil, corrupt("missing header")
	}
	if header.FormatVersion < MinSnapshotFormatVersion || header.FormatVersion > SnapshotFormatVersion {
		return nil, corrupt("format version %d is not supported (want %d to %d)", header.FormatVersion, MinSnapshotFormatVersion, SnapshotFormatVersion)
	}
	if v := header.MetadataVersion; v > MaxMetadataVersion {
		return nil, fmt.Errorf("%w: the snapshot is at %s %d; this binary supports %d-%d",
			ErrUnsupportedMetadataVersion, MetadataVersionFeature, v, MinMetadataVersion, MaxMetadataVersion)
	}
	return header, nil
}

func readSnapshot(r io.Reader, fn func(*keelpb.Record) error) (*Image, *SnapshotInfo, error) {
	return scanFrames(r, fn, true)
}

// scanFrames reads a snapshot stream; with build it applies every record to
// a new image (checking it), else it only decodes and counts them.
func scanFrames(r io.Reader, fn func(*keelpb.Record) error, build bool) (*Image, *SnapshotInfo, error) {
	fr := &frameReader{r: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()}
	header, err := readHeader(fr)
	if err != nil {
		return nil, nil, err
	}

	// The whole restore is one batch: the image is built in place, in its
	// own transient, and published when the trailer checks out.
	img := Empty()
	ctx := newApplyContext(header.Index, header.Term, true, int(min(header.Partitions, 1<<20)))
	var count uint64
	var typeCounts [4]int // brokers, topics, partitions, configs
	dec := &recordDecoder{reuse: fn == nil}
	for {
		kind, payload, err := fr.next()
		if err != nil {
			return nil, nil, err
		}
		switch kind {
		case frameRecord:
			rec, err := dec.decode(payload)
			if err != nil {
				return nil, nil, corrupt("record %d: %v", count, err)
			}
			if build {
				if err := applyRecord(img, rec, ctx); err != nil {
					return nil, nil, corrupt("record %d (%s): %v", count, RecordType(rec), err)
				}
			}
			switch rec.Record.(type) {
			case *keelpb.Record_BrokerRegistration:
				typeCounts[0]++
			case *keelpb.Record_Topic:
				typeCounts[1]++
			case *keelpb.Record_Partition:
				typeCounts[2]++
			case *keelpb.Record_Config:
				typeCounts[3]++
			}
			if fn != nil {
				if err := fn(rec); err != nil {
					return nil, nil, err
				}
			}
			count++
		case frameTrailer:
			trailer := &keelpb.SnapshotTrailer{}
			if err := proto.Unmarshal(payload, trailer); err != nil {
				return nil, nil, corrupt("bad trailer: %v", err)
			}
			if trailer.RecordCount != count {
				return nil, nil, corrupt("trailer counts %d records, read %d", trailer.RecordCount, count)
			}
			if header.RecordCount != count || header.Brokers != uint64(typeCounts[0]) ||
				header.Topics != uint64(typeCounts[1]) || header.Partitions != uint64(typeCounts[2]) || header.Configs != uint64(typeCounts[3]) {
				return nil, nil, corrupt("header counts (%d records, %d brokers, %d topics, %d partitions, %d configs) do not match the body (%d, %d, %d, %d, %d)",
					header.RecordCount, header.Brokers, header.Topics, header.Partitions, header.Configs,
					count, typeCounts[0], typeCounts[1], typeCounts[2], typeCounts[3])
			}
			if !bytes.Equal(trailer.Sha256, fr.sum.Sum(nil)) {
				return nil, nil, corrupt("checksum mismatch")
			}
			if _, err := fr.r.ReadByte(); err != io.EOF {
				return nil, nil, corrupt("data after the trailer")
			}
			info := &SnapshotInfo{
				FormatVersion: header.FormatVersion, MetadataVersion: header.MetadataVersion, ClusterID: header.ClusterId, Index: header.Index, Term: header.Term,
				ControllerEpoch: header.ControllerEpoch, Records: count, SHA256: trailer.Sha256,
				Brokers: typeCounts[0], Topics: typeCounts[1], Partitions: typeCounts[2], Configs: typeCounts[3],
			}
			if d := header.GetDigest(); len(d) == sha256.Size && header.GetDigestIndex() > 0 {
				info.Digest = &Digest{Start: header.GetDigestStart(), Index: header.GetDigestIndex()}
				copy(info.Digest.Sum[:], d)
			}
			if header.GetDivergedIndex() > 0 || header.GetDivergedReason() != "" {
				info.Diverged = &Divergence{Index: header.GetDivergedIndex(), Reason: header.GetDivergedReason()}
			}
			if !build {
				return nil, info, nil
			}
			ctx.finish()
			if img.ClusterID != header.ClusterId || img.ControllerEpoch != header.ControllerEpoch ||
				(header.MetadataVersion != 0 && img.MetadataVersion != header.MetadataVersion) {
				return nil, nil, corrupt("header does not match the records")
			}
			img.Offset, img.Term = header.Index, header.Term
			info.Brokers, info.Topics, info.Partitions = img.BrokerCount(), img.TopicCount(), img.PartitionCount()
			return img, info, nil
		default:
			return nil, nil, corrupt("unknown frame kind %q", kind)
		}
	}
}
