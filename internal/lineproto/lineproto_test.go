package lineproto

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
	"github.com/stratadb/strata/internal/tsbs"
)

func format(m string, p row.Point) string {
	var b strings.Builder
	b.WriteString(m)
	for _, t := range p.Tags {
		fmt.Fprintf(&b, "|%s=%s", t.Name, t.Value)
	}
	for _, f := range p.Fields {
		if f.Value.Kind() == row.String {
			fmt.Fprintf(&b, " %s:%s=%s", f.Name, f.Value.Kind(), f.Value.Str())
			continue
		}
		fmt.Fprintf(&b, " %s:%s=%v", f.Name, f.Value.Kind(), f.Value)
	}
	fmt.Fprintf(&b, " @%d", p.TS)
	return b.String()
}

func TestParse(t *testing.T) {
	now := time.Unix(100, 123456789)
	cases := []struct{ in, want string }{
		{`cpu,host=a usage=0.5 1700000000000000000`, `cpu|host=a usage:float64=0.5 @1700000000000000000`},
		{`cpu usage=1,n=-3i,u=7u,s="hi",b=t,B=FALSE`, `cpu usage:float64=1 n:int64=-3 u:uint64=7 s:string=hi b:bool=true B:bool=false @100123456789`},
		{`we\,ird\ m,t\ k=v\,1\=2 f\=x=1e3`, `we,ird m|t k=v,1=2 f=x:float64=1000 @100123456789`},
		{`m s="a \"q\" \\ b, c=d" 5`, `m s:string=a "q" \ b, c=d @5`},
		{`m,a=1,b=2 x=18446744073709551615u -5`, `m|a=1|b=2 x:uint64=18446744073709551615 @-5`},
		{`m  x=1   7`, `m x:float64=1 @7`},
	}
	for _, c := range cases {
		b, errs := NewParser().Parse([]byte(c.in), Nanosecond, now)
		if len(errs) != 0 || b.Len() != 1 {
			t.Errorf("%s: %v", c.in, errs)
			continue
		}
		if got := format(b.Measurements[0], b.Points[0]); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestPrecisions(t *testing.T) {
	for _, c := range []struct {
		p    string
		want int64
	}{{"", 7}, {"ns", 7}, {"u", 7e3}, {"us", 7e3}, {"ms", 7e6}, {"s", 7e9}, {"m", 420e9}, {"h", 7 * 3600e9}} {
		prec, err := ParsePrecision(c.p)
		if err != nil {
			t.Fatal(err)
		}
		b, errs := NewParser().Parse([]byte("m x=1 7"), prec, time.Now())
		if len(errs) != 0 || b.Points[0].TS != c.want {
			t.Errorf("precision %q: %v %v", c.p, b.Points, errs)
		}
	}
	if _, err := ParsePrecision("d"); err == nil {
		t.Error("precision d accepted")
	}
	// A point without a timestamp gets now, truncated to the precision.
	b, _ := NewParser().Parse([]byte("m x=1"), Second, time.Unix(5, 999))
	if b.Points[0].TS != 5e9 {
		t.Errorf("default timestamp %d", b.Points[0].TS)
	}
	if _, errs := NewParser().Parse([]byte("m x=1 9223372036854775807"), Second, time.Now()); len(errs) != 1 {
		t.Error("overflowing timestamp accepted")
	}
}

func TestErrorsNameTheLine(t *testing.T) {
	in := strings.Join([]string{
		"# comment",
		"ok x=1 1",
		"",
		"nofields",
		"m,t x=1",
		"m x= 1",
		"m x=1i5",
		`m s="open`,
		"m x=inf",
		"m x=1 notatime",
		",t=1 x=1",
		"m x=1,",
		"m x=0x10",
		"ok2 y=2i 2",
	}, "\n")
	b, errs := NewParser().Parse([]byte(in), Nanosecond, time.Now())
	if b.Len() != 2 || b.Measurements[0] != "ok" || b.Measurements[1] != "ok2" || b.Lines[0] != 2 || b.Lines[1] != 14 {
		t.Fatalf("valid points: %v %v %v", b.Measurements, b.Lines, b.Points)
	}
	wantLines := []int{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	if len(errs) != len(wantLines) {
		t.Fatalf("errors: %v", errs)
	}
	for i, e := range errs {
		if e.Line != wantLines[i] || e.Reason == "" || !strings.Contains(e.Error(), fmt.Sprintf("line %d", e.Line)) {
			t.Errorf("error %d: %v", i, e)
		}
	}
}

func TestValuesRoundTripExtremes(t *testing.T) {
	b, errs := NewParser().Parse([]byte(fmt.Sprintf("m a=%di,b=%v,c=-0.0", int64(math.MinInt64), math.MaxFloat64)), Nanosecond, time.Now())
	if len(errs) != 0 || b.Points[0].Fields[0].Value.Int() != math.MinInt64 || b.Points[0].Fields[1].Value.Float() != math.MaxFloat64 {
		t.Fatalf("%v %v", b.Points, errs)
	}
}

func BenchmarkParseTSBS(b *testing.B) {
	line := "cpu,hostname=host_0,region=eu-central-1,datacenter=eu-central-1a,rack=6,os=Ubuntu15.10,arch=x86,team=SF,service=19,service_version=1,service_environment=test usage_user=58.1,usage_system=2.6,usage_idle=24.9,usage_nice=61.1,usage_iowait=22.9,usage_irq=63.9,usage_softirq=6.4,usage_steal=44.8,usage_guest=80.6,usage_guest_nice=38.3 1451606400000000000\n"
	data := []byte(strings.Repeat(line, 1000))
	p := NewParser()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		p.Parse(data, Nanosecond, time.Now())
	}
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkParseTSBSHosts parses requests as `strata bench ingest` sends
// them: 10,000 lines a request over 4,000 hosts in turn, each request
// going on where the last ended, so a parser sees every host's tag set
// again and again, in the same order.
func BenchmarkParseTSBSHosts(b *testing.B) {
	const hosts, lines, requests = 4000, 10_000, 4
	rng := rand.New(rand.NewPCG(1, 2))
	var bodies [][]byte
	for r := range requests {
		var sb strings.Builder
		for i := r * lines; i < (r+1)*lines; i++ {
			sb.WriteString("cpu" + tsbs.LineTags(i%hosts))
			for j, f := range tsbs.Fields {
				sep := ","
				if j == 0 {
					sep = " "
				}
				fmt.Fprintf(&sb, "%s%s=%.2f", sep, f, rng.Float64()*100)
			}
			fmt.Fprintf(&sb, " %d\n", 1451606400000000000+int64(i/hosts)*10_000_000_000)
		}
		bodies = append(bodies, []byte(sb.String()))
	}
	p := NewParser()
	b.SetBytes(int64(len(bodies[0])))
	n := 0
	for b.Loop() {
		p.Parse(bodies[n%requests], Nanosecond, time.Now())
		n++
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "lines/s")
}

// One parser across requests of changing shapes, with malformed lines
// between good ones, parses each request as a fresh parser does; and a
// request like the last one is parsed into the same memory.
func TestParserReusesItsMemory(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	request := func() []byte {
		var b strings.Builder
		for range 1 + rng.IntN(300) {
			if rng.IntN(20) == 0 {
				b.WriteString("broken line\n")
				continue
			}
			fmt.Fprintf(&b, "m%d", rng.IntN(3))
			for i := range rng.IntN(12) {
				fmt.Fprintf(&b, ",t%d=v%d", i, rng.IntN(50))
			}
			for i := range 1 + rng.IntN(12) {
				sep := ","
				if i == 0 {
					sep = " "
				}
				fmt.Fprintf(&b, "%sf%d=%d", sep, i, rng.IntN(1000))
			}
			fmt.Fprintf(&b, " %d\n", rng.IntN(1e6))
		}
		return []byte(b.String())
	}
	render := func(b *Batch, errs []*LineError) []string {
		var out []string
		for i := range b.Points {
			out = append(out, fmt.Sprintf("%d:%s", b.Lines[i], format(b.Measurements[i], b.Points[i])))
		}
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return out
	}
	reused := NewParser()
	for i := range 50 {
		data := request()
		got := render(reused.Parse(data, Nanosecond, time.Unix(0, 0)))
		want := render(NewParser().Parse(data, Nanosecond, time.Unix(0, 0)))
		if !slices.Equal(got, want) {
			t.Fatalf("request %d:\n got %q\nwant %q", i, got, want)
		}
	}
	data := []byte(strings.Repeat("m,a=1,b=2 x=1,y=2 5\n", 100))
	first, _ := reused.Parse(data, Nanosecond, time.Now())
	tags, fields := &first.Points[0].Tags[0], &first.Points[0].Fields[0]
	second, _ := reused.Parse(data, Nanosecond, time.Now())
	if &second.Points[0].Tags[0] != tags || &second.Points[0].Fields[0] != fields {
		t.Error("a request like the last one was parsed into new memory")
	}
}

// decimal agrees with strconv.ParseFloat to the bit wherever it answers,
// and answers for the usual forms.
func TestDecimalMatchesParseFloat(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	check := func(s string) {
		t.Helper()
		got, ok := decimal([]byte(s))
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%q: decimal %v (%x), strconv %v (%x) %v", s, got, math.Float64bits(got), want, math.Float64bits(want), err)
		}
	}
	for _, s := range []string{"0", "-0", "-0.0", "0.1", "1.", ".5", "58.1", "-2.6", "9007199254740992", "9007199254740993",
		"1234567890123456789", "0.0000000000000000000001", "123.4567890123456789", "4503599627370497.5"} {
		check(s)
	}
	for _, s := range []string{"", "-", ".", "1.2.3", "1e3", "+1", "0x10", "inf", "1_000", "12345678901234567890"} {
		if _, ok := decimal([]byte(s)); ok {
			t.Errorf("%q: decimal answered", s)
		}
	}
	for _, s := range []string{"58.1", "-2.6", "100", "0.25"} {
		if _, ok := decimal([]byte(s)); !ok {
			t.Errorf("%q: left to strconv", s)
		}
	}
	for range 200_000 {
		var s string
		switch rng.IntN(3) {
		case 0: // how clients print float64s
			s = strconv.FormatFloat(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(30)-15)), 'f', -1, 64)
		case 1: // fixed decimals
			s = strconv.FormatFloat(rng.Float64()*1000, 'f', rng.IntN(8), 64)
		default: // digit strings
			b := make([]byte, 1+rng.IntN(21))
			for i := range b {
				b[i] = byte('0' + rng.IntN(10))
			}
			if k := rng.IntN(len(b) + 1); k < len(b) {
				b[k] = '.'
			}
			s = string(b)
		}
		check(s)
	}
}

// Two points of a request have the same Shape only if they have the same
// tag names and field names and kinds in the same order; consecutive
// points of one shape share it.
func TestShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 0))
	shapeKey := func(m string, pt row.Point) string {
		k := m
		for _, tg := range pt.Tags {
			k += "|" + tg.Name
		}
		for _, f := range pt.Fields {
			k += fmt.Sprintf(" %s:%v", f.Name, f.Value.Kind())
		}
		return k
	}
	p := NewParser()
	// A malformed line between two points leaves its names behind.
	batch, _ := p.Parse([]byte("m0,a=v,c=v x=1 1\nm0,a=v,b=v x=1,broken\nm0,a=v,b=v x=1 1\n"), Nanosecond, time.Now())
	if batch.Len() != 2 || batch.Points[0].Shape == batch.Points[1].Shape {
		t.Fatalf("points of two shapes around a malformed line: %v", batch.Points)
	}
	for range 30 {
		var b strings.Builder
		for range 1 + rng.IntN(200) {
			switch rng.IntN(15) {
			case 0:
				b.WriteString("m0,a=v,b=v x=1,broken\n")
				continue
			case 1:
				b.WriteString("m1,b=v,c=v y=1 notatime\n")
				continue
			}
			fmt.Fprintf(&b, "m%d", rng.IntN(2))
			for i := range rng.IntN(3) {
				fmt.Fprintf(&b, ",%c=v", 'a'+rng.IntN(3)+i)
			}
			for i := range 1 + rng.IntN(2) {
				sep := ","
				if i == 0 {
					sep = " "
				}
				fmt.Fprintf(&b, "%s%c=%s", sep, 'x'+rng.IntN(2)+i, []string{"1", "1i", "t", `"s"`}[rng.IntN(4)])
			}
			b.WriteString(" 1\n")
		}
		batch, _ = p.Parse([]byte(b.String()), Nanosecond, time.Now())
		lines := strings.Split(b.String(), "\n")
		byShape := map[uint32]string{}
		for i, pt := range batch.Points {
			if pt.Shape == 0 {
				t.Fatalf("line %d: no shape", batch.Lines[i])
			}
			k := shapeKey(batch.Measurements[i], pt)
			if prev, ok := byShape[pt.Shape]; ok && prev != k {
				t.Fatalf("line %d: shape %d is %q and %q", batch.Lines[i], pt.Shape, prev, k)
			}
			byShape[pt.Shape] = k
			// A point's tags are sorted, so the key above cannot tell
			// "m,b=v,c=v" from "m,c=v,b=v": lines are of one shape when
			// their names come in the same order, which every value
			// here being "v" makes the same text.
			if i > 0 && batch.Lines[i] == batch.Lines[i-1]+1 && lines[batch.Lines[i]-1] == lines[batch.Lines[i-1]-1] && pt.Shape != batch.Points[i-1].Shape {
				t.Fatalf("line %d: the shape of the line before, with another id", batch.Lines[i])
			}
		}
	}
}

// TestShapedNamesMatchScans: a request's lines read with the names of the
// line before them at hand (Parser.shaped) give what each line read alone
// gives, for names that are prefixes of each other, escaped names, names
// that repeat at other positions, and malformed lines in between.
func TestShapedNamesMatchScans(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	names := []string{"host", "hostname", "h", `ho\ st`, `ho\,st`, `a\=b`, "cpu", "cpu_usage", `c\\d`}
	pick := func() string { return names[rng.IntN(len(names))] }
	show := func(m string, pt row.Point) string {
		return fmt.Sprint(m, pt.Tags, pt.Fields, pt.TS)
	}
	p := NewParser()
	hits := 0
	defer func() {
		if hits == 0 {
			t.Error("no point came with its series key")
		}
	}()
	for round := range 200 {
		var lines []string
		var last string
		for range 1 + rng.IntN(40) {
			if last != "" && rng.IntN(3) > 0 { // mostly the last line's shape, as requests are
				lines = append(lines, last)
				continue
			}
			var b strings.Builder
			b.WriteString(pick())
			for range rng.IntN(4) {
				fmt.Fprintf(&b, ",%s=v%d", pick(), rng.IntN(3))
			}
			for i := range 1 + rng.IntN(3) {
				sep := ","
				if i == 0 {
					sep = " "
				}
				fmt.Fprintf(&b, "%s%s=%s", sep, pick(), []string{"1", "2.5", "-3i", "t", `"s"`, "1e3", "x"}[rng.IntN(7)])
			}
			fmt.Fprintf(&b, " %d", rng.IntN(100))
			last = b.String()
			lines = append(lines, last)
		}
		// Vary the values of repeated lines, keeping their names.
		for i := range lines {
			lines[i] = strings.Replace(lines[i], "=v1", fmt.Sprintf("=v%d", rng.IntN(5)), 1)
		}
		now := time.Now()
		batch, errs := p.Parse([]byte(strings.Join(lines, "\n")), Nanosecond, now)
		var got []string
		for i, pt := range batch.Points {
			got = append(got, fmt.Sprint(batch.Lines[i], " ", show(batch.Measurements[i], pt)))
			if pt.Series == nil {
				continue
			}
			hits++
			if key, err := row.EncodeSeries(nil, pt.Tags); err != nil || string(key) != string(pt.Series) {
				t.Fatalf("round %d, line %d: series key %q, its tags %v encode to %q (%v)", round, batch.Lines[i], pt.Series, pt.Tags, key, err)
			}
		}
		for _, e := range errs {
			got = append(got, fmt.Sprint(e.Line, " ", e.Reason))
		}
		var want []string
		var wantErrs []string
		for i, l := range lines {
			alone := NewParser()
			b, es := alone.Parse([]byte(l), Nanosecond, now)
			for _, pt := range b.Points {
				want = append(want, fmt.Sprint(i+1, " ", show(b.Measurements[0], pt)))
			}
			for _, e := range es {
				wantErrs = append(wantErrs, fmt.Sprint(i+1, " ", e.Reason))
			}
		}
		want = append(want, wantErrs...)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: request\n%s\nread as\n%s\nits lines alone\n%s", round, strings.Join(lines, "\n"), strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// A request whose lines all have known tag sets leaves the parser no tag
// arena; a later request of a new tag set still reads its tags.
func TestKnownTagSetsLeaveNoTagArena(t *testing.T) {
	p := NewParser()
	req := []byte("cpu,host=a,dc=x v=1 1\ncpu,host=b,dc=x v=2 2\n")
	for i := range 2 {
		b, errs := p.Parse(req, Nanosecond, time.Now())
		if len(errs) > 0 || b.Len() != 2 || fmt.Sprint(b.Points[1].Tags) != "[{dc x} {host b}]" {
			t.Fatalf("request %d: %v %v", i, b.Points, errs)
		}
	}
	if p.tags != nil || p.ends != nil {
		t.Fatalf("a tag arena of %d is kept after a request of known tag sets", cap(p.tags))
	}
	b, errs := p.Parse([]byte("cpu,host=a,dc=x v=3 3\ncpu,host=c,dc=y v=4 4\n"), Nanosecond, time.Now())
	if len(errs) > 0 || b.Len() != 2 {
		t.Fatalf("%v %v", b.Points, errs)
	}
	if got := fmt.Sprint(b.Points[1].Tags); got != "[{dc y} {host c}]" {
		t.Fatalf("new tag set read as %s", got)
	}
	if key, err := row.EncodeSeries(nil, b.Points[1].Tags); err != nil || string(key) != string(b.Points[1].Series) {
		t.Fatalf("series key %q, its tags encode to %q (%v)", b.Points[1].Series, key, err)
	}
}
