package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// ErrCorrupt: a delta or checkpoint cannot be decoded or fails its checksum.
var ErrCorrupt = errors.New("manifest: corrupt object")

// CorruptError names the object that failed to decode.
type CorruptError struct {
	Region  string
	Version uint64
	Key     string
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("manifest: corrupt object: region %s version %d key %s: %s", e.Region, e.Version, e.Key, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const formatVersion = 1

// delta is the object format of one delta. Body holds the actions exactly as
// written, so the checksum covers the bytes on storage.
type delta struct {
	Format  int             `json:"format"`
	Region  string          `json:"region"`
	Version uint64          `json:"version"`
	Writer  string          `json:"writer"`
	Time    time.Time       `json:"time"`
	CRC32C  uint32          `json:"crc32c"`
	Body    json.RawMessage `json:"actions"`
}

type checkpoint struct {
	Format  int             `json:"format"`
	Region  string          `json:"region"`
	Version uint64          `json:"version"`
	CRC32C  uint32          `json:"crc32c"`
	Body    json.RawMessage `json:"state"`
}

func encodeDelta(region string, version uint64, writer string, at time.Time, actions []Action) ([]byte, error) {
	body, err := json.Marshal(actions)
	if err != nil {
		return nil, err
	}
	return json.Marshal(delta{Format: formatVersion, Region: region, Version: version, Writer: writer, Time: at.UTC(), CRC32C: crc32.Checksum(body, castagnoli), Body: body})
}

func decodeDelta(region, key string, version uint64, data []byte) (time.Time, []Action, error) {
	bad := func(reason string, args ...any) error {
		return &CorruptError{Region: region, Version: version, Key: key, Reason: fmt.Sprintf(reason, args...)}
	}
	var d delta
	if err := json.Unmarshal(data, &d); err != nil {
		return time.Time{}, nil, bad("decode (%d bytes): %v", len(data), err)
	}
	if err := checkEnvelope(bad, d.Format, d.Region, d.Version, region, version, d.CRC32C, d.Body); err != nil {
		return time.Time{}, nil, err
	}
	// A delta without actions is a void: a writer claimed the version to
	// settle a create whose outcome was unknown.
	var actions []Action
	if err := json.Unmarshal(d.Body, &actions); err != nil {
		return time.Time{}, nil, bad("decode actions: %v", err)
	}
	return d.Time, actions, nil
}

func encodeCheckpoint(region string, s *State) ([]byte, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpoint{Format: formatVersion, Region: region, Version: s.Version, CRC32C: crc32.Checksum(body, castagnoli), Body: body})
}

func decodeCheckpoint(region, key string, version uint64, data []byte) (*State, error) {
	bad := func(reason string, args ...any) error {
		return &CorruptError{Region: region, Version: version, Key: key, Reason: fmt.Sprintf(reason, args...)}
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, bad("decode (%d bytes): %v", len(data), err)
	}
	if err := checkEnvelope(bad, c.Format, c.Region, c.Version, region, version, c.CRC32C, c.Body); err != nil {
		return nil, err
	}
	s := newState()
	if err := json.Unmarshal(c.Body, s); err != nil {
		return nil, bad("decode state: %v", err)
	}
	if s.Version != version {
		return nil, bad("state is at version %d", s.Version)
	}
	for _, m := range []bool{s.Files == nil, s.Removed == nil, s.Pending == nil} {
		if m {
			return nil, bad("state lacks a file set")
		}
	}
	return s, nil
}

// checkEnvelope verifies what deltas and checkpoints share: the format, the
// region and version the object claims, and the checksum of its body.
func checkEnvelope(bad func(string, ...any) error, format int, gotRegion string, gotVersion uint64, region string, version uint64, sum uint32, body []byte) error {
	if format != formatVersion {
		return bad("unknown format %d", format)
	}
	if gotRegion != region || gotVersion != version {
		return bad("object claims region %s version %d", gotRegion, gotVersion)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return bad("checksum %08x, want %08x", got, sum)
	}
	return nil
}
