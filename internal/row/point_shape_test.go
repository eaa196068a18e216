package row

import "testing"

// Points share a shape when their tag names and field names and kinds
// match in order; a parser's Shape number says so without comparing.
func TestSameShape(t *testing.T) {
	p := Point{Tags: []Tag{{Name: "host", Value: "a"}}, Fields: []Field{{Name: "v", Value: FloatValue(1)}}}
	q := Point{Tags: []Tag{{Name: "host", Value: "b"}}, Fields: []Field{{Name: "v", Value: FloatValue(2)}}}
	if SameShape(&p, nil) || !SameShape(&q, &p) {
		t.Fatal("values, or no previous point, decided the shape")
	}
	kind := q
	kind.Fields = []Field{{Name: "v", Value: IntValue(2)}}
	name := q
	name.Tags = []Tag{{Name: "dc", Value: "b"}}
	more := q
	more.Fields = append([]Field{{Name: "u", Value: FloatValue(0)}}, q.Fields...)
	for _, o := range []Point{kind, name, more} {
		if SameShape(&o, &p) {
			t.Fatalf("%+v has %+v's shape", o, p)
		}
	}
	kind.Shape, p.Shape = 7, 7 // the parser's word is taken
	if !SameShape(&kind, &p) {
		t.Fatal("an equal Shape number was not taken")
	}
}
