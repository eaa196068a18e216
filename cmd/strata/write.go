package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/lineproto"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newWrite() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "write [FILE ...]",
		Short: "Write line protocol or CSV from files or stdin",
		Long: `Write points from files (or stdin, or "-") in InfluxDB line protocol or CSV.

Line protocol: each measurement is a table; tables and columns are created as
needed. A malformed line stops the write before its batch is sent, naming the
file and line; batches before it are written.

CSV: the first row names the columns. --table names the table, --tags lists
the tag columns, --time-column the timestamp (RFC 3339, or integers in
--precision). Other columns are fields: numbers are float64, true/false are
bool, anything else is a string; name a column "name:int64" (or uint64,
float64, string, bool) in the header to choose its type. Empty cells are
null.

Points are sent in batches of --batch; each batch is durable when the
command moves on. A progress bar is shown on a terminal for files over 1 MiB.`,
		RunE: runWrite,
	}
	clientFlags(cmd)
	f := cmd.Flags()
	f.String("format", "", "lp or csv (default: by file extension, else lp)")
	f.String("precision", "ns", "timestamp precision: ns, us, ms, s, m, h")
	f.Int("batch", 5000, "points per request")
	f.String("table", "", "table for CSV input")
	f.StringSlice("tags", nil, "tag columns of CSV input")
	f.String("time-column", "time", "timestamp column of CSV input")
	f.String("progress", "auto", "progress bar: auto, always or never")
	return cmd
}

type writeStats struct{ points, expired int64 }

func runWrite(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	format, _ := f.GetString("format")
	precName, _ := f.GetString("precision")
	batch, _ := f.GetInt("batch")
	progressMode, _ := f.GetString("progress")
	prec, err := lineproto.ParsePrecision(precName)
	if err != nil {
		return usageError{err}
	}
	if batch <= 0 {
		return usagef("--batch must be positive")
	}
	if format != "" && format != "lp" && format != "csv" {
		return usagef("--format %q: want lp or csv", format)
	}
	if len(args) == 0 {
		args = []string{"-"}
	}
	c, ctx, done, err := dial(cmd)
	if err != nil {
		return err
	}
	defer done()
	var st writeStats
	began := time.Now()
	for _, name := range args {
		var in io.Reader
		var size int64 = -1
		if name == "-" {
			in = cmd.InOrStdin()
		} else {
			file, err := os.Open(name)
			if err != nil {
				return usageError{err}
			}
			defer func() { _ = file.Close() }() // read only
			if fi, err := file.Stat(); err == nil {
				size = fi.Size()
			}
			in = file
		}
		if show := progressMode == "always" || (progressMode == "auto" && size > 1<<20 && isTerminal(cmd.ErrOrStderr())); show {
			bar := progressbar.DefaultBytes(size, "writing "+filepath.Base(name))
			in = io.TeeReader(in, bar)
			defer func() { _ = bar.Finish() }() // the progress bar's last draw
		}
		fmtName := format
		if fmtName == "" {
			fmtName = "lp"
			if strings.EqualFold(filepath.Ext(name), ".csv") {
				fmtName = "csv"
			}
		}
		send := func(table string, points []row.Point) error {
			resp, err := c.Write(ctx, &pb.WriteRequest{Table: table, Points: wire.FromPoints(points), CreateTable: true})
			if err != nil {
				return fmt.Errorf("write to %s: %w", table, err)
			}
			st.points += resp.Written
			st.expired += resp.Expired
			return nil
		}
		if fmtName == "csv" {
			err = writeCSV(cmd, name, in, prec, batch, send)
		} else {
			err = writeLP(name, in, prec, batch, send)
		}
		if err != nil {
			return err
		}
	}
	el := time.Since(began)
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %d points in %s (%.0f points/s)", st.points, el.Round(time.Millisecond), float64(st.points)/el.Seconds())
	if st.expired > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "; %d older than the table's TTL were dropped", st.expired)
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func writeLP(name string, in io.Reader, prec lineproto.Precision, batch int, send func(string, []row.Point) error) error {
	p := lineproto.NewParser()
	r := bufio.NewReaderSize(in, 1<<20)
	var chunk []byte
	lineBase := 0
	flush := func(data []byte, lines int) error {
		b, errs := p.Parse(data, prec, time.Now())
		if len(errs) > 0 {
			e := errs[0]
			return usagef("%s: line %d: %s: %q (nothing from this batch was written)", name, lineBase+e.Line, e.Reason, e.Text)
		}
		groups := map[string][]row.Point{}
		var order []string
		for i, m := range b.Measurements {
			if _, ok := groups[m]; !ok {
				order = append(order, m)
			}
			groups[m] = append(groups[m], b.Points[i])
		}
		for _, t := range order {
			if err := send(t, groups[t]); err != nil {
				return err
			}
		}
		lineBase += lines
		return nil
	}
	lines := 0
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return usagef("%s: line %d is longer than 1 MiB", name, lineBase+lines+1)
		}
		if len(line) > 0 {
			chunk = append(chunk, line...)
			if line[len(line)-1] != '\n' {
				chunk = append(chunk, '\n')
			}
			lines++
		}
		if lines >= batch || (err != nil && lines > 0) {
			if ferr := flush(chunk, lines); ferr != nil {
				return ferr
			}
			chunk, lines = chunk[:0], 0
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

type csvColumn struct {
	name string
	kind row.Kind // Null: infer
	role string   // tag, time, field
}

func writeCSV(cmd *cobra.Command, name string, in io.Reader, prec lineproto.Precision, batch int, send func(string, []row.Point) error) error {
	table, _ := cmd.Flags().GetString("table")
	tags, _ := cmd.Flags().GetStringSlice("tags")
	timeCol, _ := cmd.Flags().GetString("time-column")
	if table == "" {
		return usagef("CSV input needs --table")
	}
	cr := csv.NewReader(bufio.NewReaderSize(in, 1<<20))
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return usagef("%s: reading the header: %v", name, err)
	}
	isTag := map[string]bool{}
	for _, t := range tags {
		isTag[t] = true
	}
	cols := make([]csvColumn, len(header))
	haveTime := false
	for i, h := range header {
		n, typ, _ := strings.Cut(strings.TrimSpace(h), ":")
		c := csvColumn{name: n, role: "field"}
		switch {
		case n == timeCol:
			c.role, haveTime = "time", true
		case isTag[n]:
			c.role = "tag"
		}
		if typ != "" {
			k, ok := row.ParseKind(typ)
			if !ok {
				return usagef("%s: column %q: unknown type %q", name, n, typ)
			}
			c.kind = k
		}
		cols[i] = c
	}
	if !haveTime {
		return usagef("%s: no %q column (set --time-column)", name, timeCol)
	}
	var points []row.Point
	line := 1
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line++
		if err != nil {
			return usagef("%s: %v", name, err)
		}
		var pt row.Point
		for i, v := range rec {
			c := cols[i]
			switch c.role {
			case "time":
				ts, err := parseTime(v, prec)
				if err != nil {
					return usagef("%s: line %d: column %s: %v", name, line, c.name, err)
				}
				pt.TS = ts
			case "tag":
				if v != "" {
					pt.Tags = append(pt.Tags, row.Tag{Name: c.name, Value: strings.Clone(v)})
				}
			default:
				if v == "" {
					continue
				}
				val, err := parseCSVValue(v, c.kind)
				if err != nil {
					return usagef("%s: line %d: column %s: %v", name, line, c.name, err)
				}
				pt.Fields = append(pt.Fields, row.Field{Name: c.name, Value: val})
			}
		}
		points = append(points, pt)
		if len(points) >= batch {
			if err := send(table, points); err != nil {
				return fmt.Errorf("%s: before line %d: %w", name, line+1, err)
			}
			points = points[:0]
		}
	}
	if len(points) > 0 {
		return send(table, points)
	}
	return nil
}

func parseTime(v string, prec lineproto.Precision) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n * int64(prec), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q is neither an integer nor RFC 3339", v)
	}
	return t.UnixNano(), nil
}

func parseCSVValue(v string, k row.Kind) (row.Value, error) {
	switch k {
	case row.Int:
		n, err := strconv.ParseInt(v, 10, 64)
		return row.IntValue(n), err
	case row.Uint:
		n, err := strconv.ParseUint(v, 10, 64)
		return row.UintValue(n), err
	case row.Float:
		f, err := strconv.ParseFloat(v, 64)
		return row.FloatValue(f), err
	case row.Bool:
		b, err := strconv.ParseBool(v)
		return row.BoolValue(b), err
	case row.String:
		return row.StringValue(strings.Clone(v)), nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return row.FloatValue(f), nil
	}
	if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
		return row.BoolValue(b), nil
	}
	return row.StringValue(strings.Clone(v)), nil
}
