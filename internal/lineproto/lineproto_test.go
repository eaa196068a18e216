package lineproto

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/row"
)

func format(p Point) string {
	var b strings.Builder
	b.WriteString(p.Measurement)
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
		pts, errs := NewParser().Parse(nil, []byte(c.in), Nanosecond, now)
		if len(errs) != 0 || len(pts) != 1 {
			t.Errorf("%s: %v", c.in, errs)
			continue
		}
		if got := format(pts[0]); got != c.want {
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
		pts, errs := NewParser().Parse(nil, []byte("m x=1 7"), prec, time.Now())
		if len(errs) != 0 || pts[0].TS != c.want {
			t.Errorf("precision %q: %v %v", c.p, pts, errs)
		}
	}
	if _, err := ParsePrecision("d"); err == nil {
		t.Error("precision d accepted")
	}
	// A point without a timestamp gets now, truncated to the precision.
	pts, _ := NewParser().Parse(nil, []byte("m x=1"), Second, time.Unix(5, 999))
	if pts[0].TS != 5e9 {
		t.Errorf("default timestamp %d", pts[0].TS)
	}
	if _, errs := NewParser().Parse(nil, []byte("m x=1 9223372036854775807"), Second, time.Now()); len(errs) != 1 {
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
	pts, errs := NewParser().Parse(nil, []byte(in), Nanosecond, time.Now())
	if len(pts) != 2 || pts[0].Measurement != "ok" || pts[1].Measurement != "ok2" {
		t.Fatalf("valid points: %v", pts)
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
	pts, errs := NewParser().Parse(nil, []byte(fmt.Sprintf("m a=%di,b=%v,c=-0.0", int64(math.MinInt64), math.MaxFloat64)), Nanosecond, time.Now())
	if len(errs) != 0 || pts[0].Fields[0].Value.Int() != math.MinInt64 || pts[0].Fields[1].Value.Float() != math.MaxFloat64 {
		t.Fatalf("%v %v", pts, errs)
	}
}

func BenchmarkParseTSBS(b *testing.B) {
	line := "cpu,hostname=host_0,region=eu-central-1,datacenter=eu-central-1a,rack=6,os=Ubuntu15.10,arch=x86,team=SF,service=19,service_version=1,service_environment=test usage_user=58.1,usage_system=2.6,usage_idle=24.9,usage_nice=61.1,usage_iowait=22.9,usage_irq=63.9,usage_softirq=6.4,usage_steal=44.8,usage_guest=80.6,usage_guest_nice=38.3 1451606400000000000\n"
	data := []byte(strings.Repeat(line, 1000))
	p := NewParser()
	var pts []Point
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		pts, _ = p.Parse(pts[:0], data, Nanosecond, time.Now())
	}
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "lines/s")
}
