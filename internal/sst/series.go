package sst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
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
// suffix bytes, uvarint rows (puts and tombstones) of the series.
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
// row counts, as the writer sees its rows.
type seriesIndex struct {
	body  []byte
	last  string
	rows  int64 // of last, not yet written
	count int
}

func (s *seriesIndex) add(key string) {
	if s.count > 0 && key == s.last {
		s.rows++
		return
	}
	s.flushRows()
	shared := 0
	for shared < len(key) && shared < len(s.last) && key[shared] == s.last[shared] {
		shared++
	}
	s.body = binary.AppendUvarint(s.body, uint64(shared))
	s.body = binary.AppendUvarint(s.body, uint64(len(key)-shared))
	s.body = append(s.body, key[shared:]...)
	s.last, s.rows = key, 1
	s.count++
}

func (s *seriesIndex) flushRows() {
	if s.count > 0 {
		s.body = binary.AppendUvarint(s.body, uint64(s.rows))
		s.rows = 0
	}
}

// encode compresses the index into its object's bytes.
func (s *seriesIndex) encode(c Compression) ([]byte, error) {
	s.flushRows()
	codec, err := codecFor(c)
	if err != nil {
		return nil, err
	}
	z, err := codec.Encode(nil, s.body) // NB: Encode overwrites dst
	if err != nil {
		return nil, fmt.Errorf("sst: compress series index: %w", err)
	}
	out := make([]byte, 9, 9+len(z))
	copy(out, seriesMagic)
	out[4] = seriesFormat
	binary.LittleEndian.PutUint32(out[5:9], crc32.Checksum(z, castagnoli))
	return append(out, z...), nil
}

// EncodeSeriesIndex encodes x, whose keys are sorted and distinct (tests
// and tools; SST writers build theirs with WriteOptions.SeriesIndex).
func EncodeSeriesIndex(x SeriesIndex) ([]byte, error) {
	var s seriesIndex
	for i, k := range x.Keys {
		s.add(k)
		s.rows = x.Rows[i]
	}
	return s.encode(CompressDefault)
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
	body, err := decoder.Decode(nil, data[9:])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSeries, err)
	}
	var key, last []byte
	for n := 0; len(body) > 0; n++ {
		shared, w := binary.Uvarint(body)
		if w <= 0 {
			return fmt.Errorf("%w: bad prefix length", ErrCorruptSeries)
		}
		body = body[w:]
		suffix, w := binary.Uvarint(body)
		if w <= 0 || shared > uint64(len(last)) || suffix > uint64(len(body)-w) {
			return fmt.Errorf("%w: bad key", ErrCorruptSeries)
		}
		body = body[w:]
		key = append(append(key[:0], last[:shared]...), body[:suffix]...)
		body = body[suffix:]
		rows, w := binary.Uvarint(body)
		if w <= 0 || rows == 0 || rows > math.MaxInt64 {
			return fmt.Errorf("%w: bad row count", ErrCorruptSeries)
		}
		body = body[w:]
		if n > 0 && string(key) <= string(last) {
			return fmt.Errorf("%w: keys out of order", ErrCorruptSeries)
		}
		each(key, int64(rows))
		key, last = last, key
	}
	return nil
}
