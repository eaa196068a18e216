package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newQuery() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "query TABLE | query --promql EXPR",
		Short: "Read rows of a table, or evaluate PromQL",
		Long: `Read rows of a table in (series, time) order, or, with --promql, evaluate a
PromQL expression through the datanode's Prometheus HTTP API (--http): an
instant query at --end (default now), or a range query from --start every
--step. Series are named table_field{tags} (see docs/query.md).

--start and --end take RFC 3339 times, integers (nanoseconds since the epoch),
"now", or a duration before now such as -1h. --start is inclusive, --end
exclusive. --tag name=value filters (repeatable; all must match); --fields
chooses and orders the field columns.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if p, _ := cmd.Flags().GetString("promql"); p != "" {
				return exactArgs(0)(cmd, args)
			}
			return exactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if p, _ := cmd.Flags().GetString("promql"); p != "" {
				return runPromQL(cmd, p)
			}
			return runQuery(cmd, args)
		},
	}
	clientFlags(cmd)
	outputFlag(cmd)
	f := cmd.Flags()
	f.String("start", "", "inclusive start (default: the beginning)")
	f.String("end", "", "exclusive end (default: the end of time)")
	f.StringArray("tag", nil, "tag filter name=value (repeatable)")
	f.StringSlice("fields", nil, "fields to return (default: all)")
	f.Int("limit", 0, "most rows to print (0: all)")
	f.String("promql", "", "a PromQL expression to evaluate instead of reading a table")
	f.String("step", "1m", "--promql range queries: the resolution step")
	f.String("http", "localhost:8086", "--promql: the datanode's HTTP address")
	return cmd
}

// parseWhen parses a --start/--end value.
func parseWhen(v string, now time.Time) (int64, error) {
	switch {
	case v == "now":
		return now.UnixNano(), nil
	case strings.HasPrefix(v, "-") && !isDigits(v[1:]):
		d, err := time.ParseDuration(v[1:])
		if err != nil {
			return 0, err
		}
		return now.Add(-d).UnixNano(), nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("%q is not RFC 3339, nanoseconds, now or -DURATION", v)
	}
	return t.UnixNano(), nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func runQuery(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	req := &pb.ScanRequest{Table: args[0], Start: -1 << 63, End: 1<<63 - 1}
	now := time.Now()
	if v, _ := f.GetString("start"); v != "" {
		n, err := parseWhen(v, now)
		if err != nil {
			return usagef("--start: %v", err)
		}
		req.Start = n
	}
	if v, _ := f.GetString("end"); v != "" {
		n, err := parseWhen(v, now)
		if err != nil {
			return usagef("--end: %v", err)
		}
		req.End = n
	}
	tags, _ := f.GetStringArray("tag")
	for _, t := range tags {
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			return usagef("--tag %q: want name=value", t)
		}
		req.Tags = append(req.Tags, &pb.Tag{Name: k, Value: v})
	}
	req.Fields, _ = f.GetStringSlice("fields")
	limit, _ := f.GetInt("limit")
	format, _ := f.GetString("output")
	if format != "table" && format != "csv" && format != "json" {
		return usagef("unknown output format %q (want table, csv or json)", format)
	}
	c, ctx, done, err := dial(cmd)
	if err != nil {
		return err
	}
	defer done()
	stream, err := c.Scan(ctx, req)
	if err != nil {
		return fmt.Errorf("query %s: %w", args[0], err)
	}
	var fields []*pb.FieldInfo
	var rows [][]string
	tagIdx := map[string]int{}
	var tagNames []string
	type outRow struct {
		tags []*pb.Tag
		ts   int64
		vals []*pb.Value
	}
	var buf []outRow
	n := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("query %s: %w", args[0], err)
		}
		if resp.Fields != nil {
			fields = resp.Fields
		}
		for _, r := range resp.Rows {
			if limit > 0 && n >= limit {
				break
			}
			tags := resp.Series[r.Series].Tags
			for _, t := range tags {
				if _, ok := tagIdx[t.Name]; !ok {
					tagIdx[t.Name] = len(tagNames)
					tagNames = append(tagNames, t.Name)
				}
			}
			buf = append(buf, outRow{tags: tags, ts: r.Ts, vals: r.Values})
			n++
		}
		if limit > 0 && n >= limit {
			break
		}
	}
	header := append([]string{"time"}, tagNames...)
	for _, fi := range fields {
		header = append(header, fi.Name)
	}
	for _, r := range buf {
		line := make([]string, len(header))
		line[0] = time.Unix(0, r.ts).UTC().Format(time.RFC3339Nano)
		for _, t := range r.tags {
			line[1+tagIdx[t.Name]] = t.Value
		}
		for j, v := range r.vals {
			line[1+len(tagNames)+j] = formatValue(v)
		}
		rows = append(rows, line)
	}
	return output(cmd.OutOrStdout(), format, header, rows)
}

func formatValue(v *pb.Value) string {
	switch k := v.GetKind().(type) {
	case *pb.Value_Float:
		return strconv.FormatFloat(k.Float, 'g', -1, 64)
	case *pb.Value_Int:
		return strconv.FormatInt(k.Int, 10)
	case *pb.Value_Uint:
		return strconv.FormatUint(k.Uint, 10)
	case *pb.Value_String_:
		return k.String_
	case *pb.Value_Bool:
		return strconv.FormatBool(k.Bool)
	}
	return ""
}
