package sst

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"

	kzstd "github.com/klauspost/compress/zstd"
)

// A series index is an SST's companion object ({file_id}.series, beside
// the file): the distinct series keys of the file, sorted, each with its
// row count. Label and series queries list a region's series from these
// without opening an SST, and tag-filtered scans find the rows of the
// series they select without reading the SST's series column. It is
// written with its SST, under the same pending-outputs reservation, and
// deleted with it (docs/format/sst.md, "Series index").
//
// Layout: the magic "SSER", a format byte (1), the CRC-32C (little endian)
// of the rest, then one zstd frame holding each key front-coded against the
// one before it: uvarint shared-prefix length, uvarint suffix length, the
// suffix bytes, uvarint rows (puts and tombstones) of the series. The
// frame is written as a stream (seriesIndex), so it need not state its
// content size; indexes written before did, and read the same.
const seriesMagic, seriesFormat = "SSER", 1

// ErrCorruptSeries: a series index failed its checksum or does not parse.
var ErrCorruptSeries = errors.New("sst: corrupt series index")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SeriesIndex is a decoded series index: Keys sorted, and Rows[i] the
// rows of Keys[i], which are rows [sum of Rows[:i], +Rows[i]) of the file.
type SeriesIndex struct {
	Keys []string
	Rows []int64
}

// seriesIndex accumulates the sorted, distinct keys of an SST, and their
// row counts, as the writer sees its rows, and compresses them as they
// come: its memory is the compressed index so far and a chunk of
// front-coded keys, never the whole uncompressed body (which is about the
// size of the file's keys: for a flush of a million Prometheus series,
// 400 MiB, where the compressed index is a tenth of it).
type seriesIndex struct {
	raw   []byte         // front-coded keys not yet compressed
	out   chunks         // the zstd frame so far
	z     io.WriteCloser // the frame's stream, nil once closed
	err   error          // the first failure to compress
	last  string
	rows  int64 // of last, not yet written
	count int
}

// seriesChunk is how many front-coded bytes are compressed at once.
const seriesChunk = 256 << 10

// newSeriesIndex starts an index compressed at c. Its close must be called.
func newSeriesIndex(c Compression) (*seriesIndex, error) {
	codec, err := codecFor(c)
	if err != nil {
		return nil, err
	}
	s := &seriesIndex{raw: make([]byte, 0, seriesChunk+4096)}
	s.z = codec.stream(&s.out)
	return s, nil
}

func (s *seriesIndex) add(key string) {
	if s.count > 0 && key == s.last {
		s.rows++
		return
	}
	s.flushRows()
	if len(s.raw) >= seriesChunk {
		s.compress()
	}
	shared := 0
	for shared < len(key) && shared < len(s.last) && key[shared] == s.last[shared] {
		shared++
	}
	s.raw = binary.AppendUvarint(s.raw, uint64(shared))
	s.raw = binary.AppendUvarint(s.raw, uint64(len(key)-shared))
	s.raw = append(s.raw, key[shared:]...)
	s.last, s.rows = key, 1
	s.count++
}

func (s *seriesIndex) flushRows() {
	if s.count > 0 {
		s.raw = binary.AppendUvarint(s.raw, uint64(s.rows))
		s.rows = 0
	}
}

// compress hands the front-coded keys to the stream.
func (s *seriesIndex) compress() {
	if s.err == nil && len(s.raw) > 0 {
		if _, err := s.z.Write(s.raw); err != nil {
			s.err = fmt.Errorf("sst: compress series index: %w", err)
		}
	}
	s.raw = s.raw[:0]
}

// encode ends the index and returns its object's bytes.
func (s *seriesIndex) encode() ([]byte, error) {
	s.flushRows()
	s.compress()
	if err := s.close(); err != nil && s.err == nil {
		s.err = fmt.Errorf("sst: compress series index: %w", err)
	}
	if s.err != nil {
		return nil, s.err
	}
	out := make([]byte, 9, 9+s.out.n)
	copy(out, seriesMagic)
	out[4] = seriesFormat
	out = s.out.appendTo(out)
	s.out = chunks{}
	binary.LittleEndian.PutUint32(out[5:9], crc32.Checksum(out[9:], castagnoli))
	return out, nil
}

// close ends the stream (idempotent).
func (s *seriesIndex) close() error {
	if s.z == nil {
		return nil
	}
	err := s.z.Close()
	s.z = nil
	return err
}

// chunks is an io.Writer keeping what it is given in chunks, so that
// growing it never copies what it holds: a chunk is an eighth of what it
// holds, between 64 KiB and 1 MiB.
type chunks struct {
	full [][]byte
	cur  []byte
	n    int
}

func (c *chunks) Write(p []byte) (int, error) {
	for k := 0; k < len(p); {
		if len(c.cur) == cap(c.cur) {
			if c.cur != nil {
				c.full = append(c.full, c.cur)
			}
			c.cur = make([]byte, 0, min(max(64<<10, c.n/8), 1<<20))
		}
		w := copy(c.cur[len(c.cur):cap(c.cur)], p[k:])
		c.cur = c.cur[:len(c.cur)+w]
		k += w
		c.n += w
	}
	return len(p), nil
}

// appendTo appends what c holds to dst.
func (c *chunks) appendTo(dst []byte) []byte {
	for _, b := range c.full {
		dst = append(dst, b...)
	}
	return append(dst, c.cur...)
}

// EncodeSeriesIndex encodes x, whose keys are sorted and distinct (tests
// and tools; SST writers build theirs with WriteOptions.SeriesIndex).
func EncodeSeriesIndex(x SeriesIndex) ([]byte, error) {
	s, err := newSeriesIndex(CompressDefault)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.close() }() // idempotent: the success path's close is checked below
	for i, k := range x.Keys {
		s.add(k)
		s.rows = x.Rows[i]
	}
	return s.encode()
}

// DecodeSeriesIndex decodes a series index.
func DecodeSeriesIndex(data []byte) (SeriesIndex, error) {
	var x SeriesIndex
	err := ReadSeriesIndex(data, func(key []byte, rows int64) {
		x.Keys = append(x.Keys, string(key))
		x.Rows = append(x.Rows, rows)
	})
	if err != nil {
		return SeriesIndex{}, err
	}
	return x, nil
}

// ReadSeriesIndex checks and decodes a series index, calling each with
// every key, in order, and its rows. key is valid only during the call
// (the keys are rebuilt in one buffer): a reader keeps what it needs of it,
// not the key itself. Nothing is called unless the checksum holds, but a
// malformed body found past some keys returns its error after them.
//
// The body is decompressed as it is read, a buffer at a time, never whole.
// For the index of a million Prometheus series (425 MiB of keys, 33 MiB
// compressed), decoding it at once took 4.4 s and 2.2 GB of allocations;
// streamed, 0.22 s and 0.4 MB (BenchmarkReadSeriesIndex). Every cold read
// of a file's postings pays this.
func ReadSeriesIndex(data []byte, each func(key []byte, rows int64)) error {
	if len(data) < 9 || string(data[:4]) != seriesMagic {
		return fmt.Errorf("%w: bad magic", ErrCorruptSeries)
	}
	if data[4] != seriesFormat {
		return fmt.Errorf("%w: unknown format %d", ErrCorruptSeries, data[4])
	}
	if crc32.Checksum(data[9:], castagnoli) != binary.LittleEndian.Uint32(data[5:9]) {
		return fmt.Errorf("%w: checksum mismatch", ErrCorruptSeries)
	}
	z := getSeriesDecoder()
	defer putSeriesDecoder(z)
	if err := z.d.Reset(bytes.NewReader(data[9:])); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSeries, err)
	}
	body := z.br
	body.Reset(z.d)
	corrupt := func(what string, err error) error {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: %s: %w", ErrCorruptSeries, what, err)
	}
	var key, last []byte
	for n := 0; ; n++ {
		shared, err := binary.ReadUvarint(body)
		if err == io.EOF {
			return nil // the end, between two keys
		}
		if err != nil {
			return corrupt("bad prefix length", err)
		}
		suffix, err := binary.ReadUvarint(body)
		if err != nil || shared > uint64(len(last)) || suffix > maxSeriesSuffix {
			return corrupt("bad key", err)
		}
		key = append(key[:0], last[:shared]...)
		key = slices.Grow(key, int(suffix))[:int(shared+suffix)]
		if _, err := io.ReadFull(body, key[shared:]); err != nil {
			return corrupt("bad key", err)
		}
		rows, err := binary.ReadUvarint(body)
		if err != nil || rows == 0 || rows > math.MaxInt64 {
			return corrupt("bad row count", err)
		}
		if n > 0 && string(key) <= string(last) {
			return fmt.Errorf("%w: keys out of order", ErrCorruptSeries)
		}
		each(key, int64(rows))
		key, last = last, key
	}
}

// maxSeriesSuffix bounds a key's suffix in a series index: far above any
// series key, far below what a corrupt length could make a reader
// allocate.
const maxSeriesSuffix = 16 << 20

// seriesDecoder is a streaming zstd decoder and the buffer keys are read
// from, kept for the next read (a decoder's state is a window and its
// history: about a MiB, not worth building for every file).
type seriesDecoder struct {
	d  *kzstd.Decoder
	br *bufio.Reader
}

var seriesDecoders = sync.Pool{New: func() any {
	// Concurrency 1: decoded in Read, on the caller's goroutine.
	d, err := kzstd.NewReader(nil, kzstd.WithDecoderConcurrency(1))
	if err != nil {
		panic(fmt.Sprintf("sst: zstd decoder: %v", err)) // only for invalid options
	}
	return &seriesDecoder{d: d, br: bufio.NewReaderSize(nil, 64<<10)}
}}

func getSeriesDecoder() *seriesDecoder { return seriesDecoders.Get().(*seriesDecoder) }

func putSeriesDecoder(z *seriesDecoder) {
	z.br.Reset(nil)
	_ = z.d.Reset(nil) // lets go of the data; a nil reader is always taken
	seriesDecoders.Put(z)
}
