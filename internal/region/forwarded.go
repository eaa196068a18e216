package region

import (
	"fmt"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/wal"
)

// A batch another datanode forwarded (Batch.Encoded) goes into the WAL as
// it came over the wire: the owner of the region checks it, writes it to
// its memtable and encodes nothing again (wal.Member.AppendChunk). Its
// entries are then in the WAL as points with field names, not as entries
// with the schema's ordinals; replay turns them back into the entries the
// write made (forwardedEntries), by the region's schema, which holds every
// column a write added before the write went into the WAL (schemaFor).

// forwarded is the WAL's decoder of the region's forwarded chunks (nil
// without Options.DecodeForwarded: a WAL holding one fails to replay).
func (r *Region) forwarded() wal.Forwarded {
	if r.opts.DecodeForwarded == nil {
		return nil
	}
	return func(data []byte, dst []row.Entry) ([]row.Entry, error) {
		points, keys, err := r.opts.DecodeForwarded(data)
		if err != nil {
			return dst, err
		}
		return forwardedEntries(dst, points, keys, r.Schema())
	}
}

// forwardedEntries appends the entries write made of points (keys[i] the
// series key of points[i]): each a put of its point's fields placed at
// their ordinals in sch, up to the last it has, the others null.
func forwardedEntries(dst []row.Entry, points []row.Point, keys [][]byte, sch *schema.Schema) ([]row.Entry, error) {
	if len(keys) != len(points) {
		return dst, fmt.Errorf("%d series keys for %d points", len(keys), len(points))
	}
	var ords []int
	var prev *row.Point
	for i := range points {
		p := &points[i]
		if !row.SameShape(p, prev) {
			ords = ords[:0]
			for _, f := range p.Fields {
				ord, ok := sch.FieldOrdinal(f.Name)
				if !ok {
					return dst, fmt.Errorf("point %d: field %q is not a column of the region", i, f.Name)
				}
				ords = append(ords, ord)
			}
		}
		prev = p
		width := 0
		for _, o := range ords {
			width = max(width, o+1)
		}
		fields := make([]row.Value, width)
		for j, f := range p.Fields {
			fields[ords[j]] = f.Value
		}
		dst = append(dst, row.Entry{Series: string(keys[i]), TS: p.TS, Op: row.Put, Fields: fields})
	}
	return dst, nil
}
