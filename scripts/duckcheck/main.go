// Command duckcheck prints the rows of Parquet files as DuckDB reads them
// (read_parquet): a header line of column names, then one line a row,
// tab-separated (byte arrays in hex, timestamps in Unix nanoseconds). A
// module of its own, so that Strata does not link DuckDB: build it with
//
//	cd scripts/duckcheck && go build -o /tmp/duckcheck .
//
// and point TestCompactedSSTIsPlainParquet (internal/compact) at it with
// STRATA_DUCKCHECK=/tmp/duckcheck (docs/format/sst.md, "Other readers").
package main

import (
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		panic(err)
	}
	for _, f := range os.Args[1:] {
		var q = fmt.Sprintf(`SELECT * FROM read_parquet('%s')`, f)
		rows, err := db.Query(q)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		w := os.Stdout
		fmt.Fprintln(w, cols)
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				panic(err)
			}
			for i, v := range vals {
				if i > 0 {
					fmt.Fprint(w, "\t")
				}
				switch x := v.(type) {
				case []byte:
					fmt.Fprintf(w, "%x", x)
				case time.Time:
					fmt.Fprint(w, x.UnixNano())
				default:
					fmt.Fprint(w, x)
				}
			}
			fmt.Fprintln(w)
		}
		if err := rows.Err(); err != nil {
			panic(err)
		}
	}
}
