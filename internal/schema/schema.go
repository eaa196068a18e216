// Package schema is a table's column set: tags (strings that form the series
// key), one timestamp column and typed fields. Columns are only ever added;
// a write whose column types disagree with the schema is rejected with a
// *ConflictError naming the column and both types.
//
// Field ordinals (a field's position among the fields, in order of addition)
// are stable for the life of a region: WAL entries and memtable rows refer
// to fields by ordinal.
package schema

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/stratadb/strata/internal/row"
)

// Roles of a column.
const (
	RoleTag       = "tag"
	RoleTimestamp = "timestamp"
	RoleField     = "field"
)

// DefaultTimestamp is the timestamp column's name unless a table sets one.
const DefaultTimestamp = "time"

// MaxNameLen bounds column names.
const MaxNameLen = 256

// ErrBadName: a column name is empty, too long, not UTF-8, has control
// characters or starts with the reserved prefix "__".
var ErrBadName = errors.New("schema: invalid column name")

// ConflictError: a write uses a column with another role or type than the
// schema has.
type ConflictError struct {
	Column               string
	HaveRole, HaveType   string
	WriteRole, WriteType string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("schema: column %q is %s %s in the schema but is written as %s %s",
		e.Column, e.HaveRole, e.HaveType, e.WriteRole, e.WriteType)
}

// Column is one column of a table's schema, as the manifest and the
// catalog persist it.
type Column struct {
	Name string `json:"name"`
	Role string `json:"role"` // "tag", "timestamp" or "field"
	Type string `json:"type"` // "string", "int64", "uint64", "float64", "bool"
}

// Persisted is a table's schema as a region's manifest and the catalog
// persist it. Columns are only ever added.
type Persisted struct {
	Version uint64   `json:"version"`
	Columns []Column `json:"columns"`
	// Labels: the tags are free-form labels (Prometheus' model), not
	// columns. Any label name is accepted, __name__ among them, and none
	// is recorded, so the schema does not grow with the label names
	// written.
	Labels bool `json:"labels,omitempty"`
}

// Field is one field column.
type Field struct {
	Name string
	Kind row.Kind
}

// Schema is an immutable, indexed view of a Persisted.
type Schema struct {
	persisted Persisted
	tsName    string
	tags      []string
	fields    []Field
	byName    map[string]int // column index in persisted.Columns
	ordinal   map[string]int // field name -> ordinal
}

// New creates the first schema of a table with the given timestamp column.
func New(timestamp string) (*Schema, error) {
	if err := ValidateName(timestamp); err != nil {
		return nil, err
	}
	return FromManifest(Persisted{Version: 1, Columns: []Column{{Name: timestamp, Role: RoleTimestamp, Type: "int64"}}})
}

// NewLabels is New for a table whose tags are free-form labels
// (Persisted.Labels).
func NewLabels(timestamp string) (*Schema, error) {
	s, err := New(timestamp)
	if err != nil {
		return nil, err
	}
	ms := s.Manifest()
	ms.Labels = true
	return FromManifest(ms)
}

// FromManifest indexes a persisted schema.
func FromManifest(ms Persisted) (*Schema, error) {
	s := &Schema{persisted: ms, byName: map[string]int{}, ordinal: map[string]int{}}
	for i, c := range ms.Columns {
		if _, dup := s.byName[c.Name]; dup {
			return nil, fmt.Errorf("schema: column %q appears twice", c.Name)
		}
		s.byName[c.Name] = i
		switch c.Role {
		case RoleTimestamp:
			if s.tsName != "" {
				return nil, errors.New("schema: two timestamp columns")
			}
			s.tsName = c.Name
		case RoleTag:
			s.tags = append(s.tags, c.Name)
		case RoleField:
			k, ok := row.ParseKind(c.Type)
			if !ok {
				return nil, fmt.Errorf("schema: field %q has unknown type %q", c.Name, c.Type)
			}
			s.ordinal[c.Name] = len(s.fields)
			s.fields = append(s.fields, Field{Name: c.Name, Kind: k})
		default:
			return nil, fmt.Errorf("schema: column %q has unknown role %q", c.Name, c.Role)
		}
	}
	if s.tsName == "" && len(ms.Columns) > 0 {
		return nil, errors.New("schema: no timestamp column")
	}
	return s, nil
}

// Manifest returns the persisted form (a region's manifest and the
// catalog hold it).
func (s *Schema) Manifest() Persisted { return s.persisted }

// Version is the schema's version; it grows with every change.
func (s *Schema) Version() uint64 { return s.persisted.Version }

// Timestamp is the timestamp column's name.
func (s *Schema) Timestamp() string { return s.tsName }

// Tags are the tag columns in order of addition (none if Labels).
func (s *Schema) Tags() []string { return s.tags }

// Labels reports whether the tags are free-form labels, not columns.
func (s *Schema) Labels() bool { return s.persisted.Labels }

// Fields are the field columns by ordinal.
func (s *Schema) Fields() []Field { return s.fields }

// FieldOrdinal returns a field's ordinal.
func (s *Schema) FieldOrdinal(name string) (int, bool) {
	i, ok := s.ordinal[name]
	return i, ok
}

// Column returns a column by name.
func (s *Schema) Column(name string) (Column, bool) {
	i, ok := s.byName[name]
	if !ok {
		return Column{}, false
	}
	return s.persisted.Columns[i], true
}

// Additions collects the columns a write needs that the schema lacks, and
// checks those it has. Add reports each column a row uses.
type Additions struct {
	base  *Schema
	added []Column
	seen  map[string]int // index into added
}

// Extend starts collecting additions against s.
func (s *Schema) Extend() *Additions { return &Additions{base: s} }

// Tag records that a write uses tag name. In a Labels schema only the
// name is checked (ValidateLabelName): labels are not columns.
func (a *Additions) Tag(name string) error {
	if a.base.persisted.Labels {
		return ValidateLabelName(name)
	}
	return a.use(name, RoleTag, "string")
}

// Field records that a write uses field name with kind k.
func (a *Additions) Field(name string, k row.Kind) error { return a.use(name, RoleField, k.String()) }

func (a *Additions) use(name, role, typ string) error {
	if c, ok := a.base.Column(name); ok {
		return check(c, name, role, typ)
	}
	if i, ok := a.seen[name]; ok {
		return check(a.added[i], name, role, typ)
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if a.seen == nil {
		a.seen = map[string]int{}
	}
	a.seen[name] = len(a.added)
	a.added = append(a.added, Column{Name: name, Role: role, Type: typ})
	return nil
}

func check(c Column, name, role, typ string) error {
	if c.Role == role && c.Type == typ {
		return nil
	}
	return &ConflictError{Column: name, HaveRole: c.Role, HaveType: c.Type, WriteRole: role, WriteType: typ}
}

// Labels reports whether the base schema's tags are labels.
func (a *Additions) Labels() bool { return a.base.persisted.Labels }

// Changed reports whether any column is new.
func (a *Additions) Changed() bool { return len(a.added) > 0 }

// Result returns the extended schema (the base itself if nothing is new).
func (a *Additions) Result() (*Schema, error) {
	if !a.Changed() {
		return a.base, nil
	}
	ms := Persisted{Version: a.base.persisted.Version + 1, Labels: a.base.persisted.Labels}
	ms.Columns = append(append(ms.Columns, a.base.persisted.Columns...), a.added...)
	return FromManifest(ms)
}

// ValidateName checks a column name.
func ValidateName(name string) error {
	if strings.HasPrefix(name, "__") {
		return fmt.Errorf("%w: %q: names starting with \"__\" are reserved", ErrBadName, name)
	}
	return ValidateLabelName(name)
}

// ValidateLabelName checks a label name of a Labels schema: a column
// name's rules without the reserved prefix (labels such as __name__ are
// Prometheus' own).
func ValidateLabelName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %.32q… is longer than %d bytes", ErrBadName, name, MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not UTF-8", ErrBadName, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q has a control character", ErrBadName, name)
		}
	}
	return nil
}
