package batchcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/keel-dev/keel/internal/bufpool"
)

// The codecs of Kafka's batch attributes, as the Java client writes them:
// gzip (RFC 1952, maybe several members), snappy (xerial's framing, or a
// raw block as librdkafka writes it), lz4 (the frame format) and zstd
// (frames). Each streams: what it holds at once is a window or a block,
// never the whole records, except a raw snappy block, decoded whole (at
// most the bound, and 24 times the block).
const (
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
)

func codecName(c int16) string {
	switch c {
	case codecNone:
		return "none"
	case codecGzip:
		return "gzip"
	case codecSnappy:
		return "snappy"
	case codecLz4:
		return "lz4"
	case codecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", c)
}

// decoder is a decompressing stream; Close gives back what it holds.
type decoder interface {
	io.Reader
	Close()
}

// zstdMaxWindow bounds the window a zstd frame may ask the decoder to
// keep: zstd's level 19 uses 8 MiB, Kafka's default level 3 less.
const zstdMaxWindow = 8 << 20

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzip.Reader) }}
	lz4Readers  = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	zstdReaders sync.Pool // *zstd.Decoder
)

// openCodec starts decompressing payload; a header that does not parse
// fails here.
func openCodec(codec int16, payload []byte, max int64) (decoder, error) {
	// A bytes.Reader, not a bytes.Buffer: zstd decodes a Buffer whole.
	src := bytes.NewReader(payload)
	switch codec {
	case codecGzip:
		z := gzipReaders.Get().(*gzip.Reader)
		if err := z.Reset(src); err != nil {
			gzipReaders.Put(z)
			return nil, err
		}
		return pooled{z, func() { gzipReaders.Put(z) }}, nil
	case codecSnappy:
		return openSnappy(payload, max)
	case codecLz4:
		z := lz4Readers.Get().(*lz4.Reader)
		z.Reset(src)
		return pooled{z, func() { z.Reset(nil); lz4Readers.Put(z) }}, nil
	case codecZstd:
		z, _ := zstdReaders.Get().(*zstd.Decoder)
		if z == nil {
			var err error
			z, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(uint64(max)))
			if err != nil {
				return nil, err
			}
		}
		if err := z.Reset(src); err != nil {
			z.Close()
			return nil, err
		}
		return pooled{z, func() {
			if z.Reset(nil) == nil {
				zstdReaders.Put(z)
			}
		}}, nil
	}
	return nil, fmt.Errorf("unknown codec %d", codec)
}

// pooled is a decoder from a pool, put back by Close.
type pooled struct {
	io.Reader
	put func()
}

func (p pooled) Close() { p.put() }

// xerialMagic opens snappy records in xerial's framing (the Java client's
// SnappyOutputStream): the magic, a version and a compatible version, then
// blocks, each a big-endian length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderSize = 16

func openSnappy(payload []byte, max int64) (decoder, error) {
	if len(payload) >= xerialHeaderSize && bytes.HasPrefix(payload, xerialMagic) {
		return &xerialReader{rest: payload[xerialHeaderSize:], max: max}, nil
	}
	buf, err := snappyBlock(nil, payload, max)
	if err != nil {
		return nil, err
	}
	return pooled{bytes.NewReader(*buf), func() { bufpool.Put(buf) }}, nil
}

// snappyMaxRatio bounds what a snappy block may decode to, per byte of
// it: its densest element copies 64 bytes for 3, so no snappy encoder
// writes a block that inflates more than about 21 times. A block that
// says more is not snappy (s2, which the decoder also reads, goes
// further); refused before its buffer is made, it costs nothing.
const snappyMaxRatio = 24

// snappyBlock decodes one raw snappy block that says it holds at most
// max bytes, and no more than snappy can, into a buffer from
// internal/bufpool: into buf when it has room, else a new one (and buf
// goes back). A producer's batch decompressed for its check allocates
// nothing, whatever its size (kgo compresses with snappy by default).
func snappyBlock(buf *[]byte, b []byte, max int64) (*[]byte, error) {
	n, err := s2.DecodedLen(b)
	switch {
	case err != nil:
		return nil, err
	case int64(n) > snappyMaxRatio*int64(len(b))+64:
		return nil, fmt.Errorf("a snappy block of %d bytes says it holds %d, more than snappy can", len(b), n)
	case int64(n) > max:
		return nil, errTooLarge
	}
	if buf == nil || cap(*buf) < n {
		bufpool.Put(buf)
		buf = bufpool.Get(n)
	}
	*buf = (*buf)[:n]
	out, err := s2.Decode(*buf, b)
	if err != nil {
		bufpool.Put(buf)
		return nil, err
	}
	*buf = out
	return buf, nil
}

// xerialReader decodes xerial's blocks one at a time, each bounded by
// what is left of max.
type xerialReader struct {
	rest []byte  // blocks not decoded yet
	out  []byte  // the current block's bytes not read yet
	buf  *[]byte // the pooled buffer out lies in, reused block after block
	max  int64   // bytes that may still be decoded
}

func (x *xerialReader) Read(p []byte) (int, error) {
	for len(x.out) == 0 {
		if len(x.rest) == 0 {
			return 0, io.EOF
		}
		if len(x.rest) < 4 {
			return 0, errors.New("xerial snappy: a block length cut short")
		}
		n := int64(binary.BigEndian.Uint32(x.rest))
		if n > int64(len(x.rest)-4) {
			return 0, fmt.Errorf("xerial snappy: a block of %d bytes, %d left", n, len(x.rest)-4)
		}
		buf, err := snappyBlock(x.buf, x.rest[4:4+n], x.max)
		if err != nil {
			x.buf = nil // given back by snappyBlock
			return 0, err
		}
		x.buf = buf
		x.rest, x.out, x.max = x.rest[4+n:], *buf, x.max-int64(len(*buf))
	}
	n := copy(p, x.out)
	x.out = x.out[n:]
	return n, nil
}

func (x *xerialReader) Close() {
	bufpool.Put(x.buf)
	x.buf, x.out = nil, nil
}
