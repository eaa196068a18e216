package sst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A series index is an SST's companion object ({file_id}.series, beside
// the file): the distinct series keys of the file, sorted. Label and series
// queries list a region's series from these without opening an SST. It is
// written with its SST, under the same pending-outputs reservation, and
// deleted with it (docs/format/sst.md, "Series index").
//
// Layout: the magic "SSER", a format byte (1), the CRC-32C (little endian)
// of the rest, then one zstd frame holding each key front-coded against the
// one before it: uvarint shared-prefix length, uvarint suffix length, the
// suffix bytes.
const seriesMagic, seriesFormat = "SSER", 1

// ErrCorruptSeries: a series index failed its checksum or does not parse.
var ErrCorruptSeries = errors.New("sst: corrupt series index")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seriesIndex accumulates the sorted, distinct keys of an SST as the writer
// sees them.
type seriesIndex struct {
	body  []byte
	last  string
	count int
}

func (s *seriesIndex) add(key string) {
	if s.count > 0 && key == s.last {
		return
	}
	shared := 0
	for shared < len(key) && shared < len(s.last) && key[shared] == s.last[shared] {
		shared++
	}
	s.body = binary.AppendUvarint(s.body, uint64(shared))
	s.body = binary.AppendUvarint(s.body, uint64(len(key)-shared))
	s.body = append(s.body, key[shared:]...)
	s.last = key
	s.count++
}

// encode compresses the index into its object's bytes.
func (s *seriesIndex) encode(c Compression) ([]byte, error) {
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

// EncodeSeriesIndex is the series index of sorted, distinct keys (tests and
// tools; SST writers build theirs with WriteOptions.SeriesIndex).
func EncodeSeriesIndex(keys []string) ([]byte, error) {
	var s seriesIndex
	for _, k := range keys {
		s.add(k)
	}
	return s.encode(CompressDefault)
}

// DecodeSeriesIndex returns the keys of a series index, sorted.
func DecodeSeriesIndex(data []byte) ([]string, error) {
	if len(data) < 9 || string(data[:4]) != seriesMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSeries)
	}
	if data[4] != seriesFormat {
		return nil, fmt.Errorf("%w: unknown format %d", ErrCorruptSeries, data[4])
	}
	if crc32.Checksum(data[9:], castagnoli) != binary.LittleEndian.Uint32(data[5:9]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptSeries)
	}
	body, err := decoder.Decode(nil, data[9:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptSeries, err)
	}
	var keys []string
	var last string
	for len(body) > 0 {
		shared, n := binary.Uvarint(body)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad prefix length", ErrCorruptSeries)
		}
		body = body[n:]
		suffix, n := binary.Uvarint(body)
		if n <= 0 || shared > uint64(len(last)) || suffix > uint64(len(body)-n) {
			return nil, fmt.Errorf("%w: bad key", ErrCorruptSeries)
		}
		body = body[n:]
		key := last[:shared] + string(body[:suffix])
		body = body[suffix:]
		if len(keys) > 0 && key <= last {
			return nil, fmt.Errorf("%w: keys out of order", ErrCorruptSeries)
		}
		keys = append(keys, key)
		last = key
	}
	return keys, nil
}
