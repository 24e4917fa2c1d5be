package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/tables"
)

// snapshotState is the stored plan and progress of an unfinished snapshot.
// It is rewritten whole on every save (one record per slot in the
// compacted state topic), so it is kept small: a few ranges per table.
type snapshotState struct {
	Started time.Time       `json:"started"`
	Tables  []tableProgress `json:"tables"`
}

// tableProgress is one table's plan: the key it is paged by and its key
// ranges.
type tableProgress struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// Key names the columns the copy pages by (the primary key, or the
	// replica identity index). Empty: the table has no such key and is
	// copied by ctid (heap block) ranges (see snapshot_ctid.go).
	Key []string `json:"key,omitempty"`
	// Ctid: copied by block ranges of file Filenode, ChunkBlocks blocks
	// per chunk. A range's Lo and Hi are then block numbers, [Lo, Hi),
	// and After holds the next block to copy. A keyless plan without it
	// (stored by an older reader: one unresumable chunk) is made again.
	Ctid        bool   `json:"ctid,omitempty"`
	Filenode    uint32 `json:"filenode,omitempty"`
	ChunkBlocks int64  `json:"chunk_blocks,omitempty"`
	// Estimate is pg_class.reltuples when the plan was made (0: unknown).
	Estimate int64           `json:"estimate,omitempty"`
	Ranges   []rangeProgress `json:"ranges"`
}

// rangeProgress is one range of a table's first key column, (Lo, Hi]
// (for a ctid plan: of its heap blocks, [Lo, Hi)), and
// how far its copy got: every row with a key at or before After has been
// produced and acknowledged by Kafka.
type rangeProgress struct {
	Lo     *string  `json:"lo,omitempty"` // exclusive; nil: unbounded
	Hi     *string  `json:"hi,omitempty"` // inclusive; nil: unbounded
	After  []string `json:"after,omitempty"`
	Rows   int64    `json:"rows,omitempty"`
	Chunks int64    `json:"chunks,omitempty"`
	Done   bool     `json:"done,omitempty"`
}

// keyColumn is a column of the key a table is paged by.
type keyColumn struct {
	Name string
	Type string // format_type, used as the parameters' cast
	OID  uint32
}

// Type OIDs whose values the planner can split into ranges.
const (
	oidInt2 = 21
	oidInt4 = 23
	oidInt8 = 20
	oidUUID = 2950
)

// tableKey returns the columns of the table's primary key or, lacking one,
// of its replica identity index, in index order; nil when it has neither
// (REPLICA IDENTITY FULL without a unique key).
func tableKey(ctx context.Context, conn *pgx.Conn, t tables.Table) ([]keyColumn, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_index i ON i.indrelid = c.oid
		JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) ON true
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		WHERE n.nspname = $1 AND c.relname = $2
		  AND i.indexrelid = COALESCE(
		        (SELECT x.indexrelid FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary),
		        (SELECT x.indexrelid FROM pg_index x WHERE x.indrelid = c.oid AND x.indisreplident AND c.relreplident = 'i'))
		ORDER BY k.ord`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("key of %s.%s: %w", t.Schema, t.Name, err)
	}
	defer rows.Close()
	var key []keyColumn
	for rows.Next() {
		var k keyColumn
		var oid int64
		if err := rows.Scan(&k.Name, &k.Type, &oid); err != nil {
			return nil, fmt.Errorf("key of %s.%s: %w", t.Schema, t.Name, err)
		}
		k.OID = uint32(oid)
		key = append(key, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("key of %s.%s: %w", t.Schema, t.Name, err)
	}
	return key, nil
}

func keyNames(key []keyColumn) []string {
	out := make([]string, len(key))
	for i, k := range key {
		out[i] = k.Name
	}
	return out
}

// planTable makes a table's plan: its key, its row estimate and up to
// maxRanges ranges of the first key column. Ranges let several workers
// copy one large table at once; they are cut where the data is (the
// column's histogram in pg_stats, else equal widths between min and max)
// for integer and uuid keys, and not at all for other key types or tables
// estimated below two chunks. A composite key is cut on its first column
// only, so rows sharing it stay in one range.
func planTable(ctx context.Context, conn *pgx.Conn, t tables.Table, key []keyColumn, maxRanges, chunkRows int) (tableProgress, error) {
	tp := tableProgress{Schema: t.Schema, Name: t.Name, Key: keyNames(key)}
	var est float64
	err := conn.QueryRow(ctx, `SELECT c.reltuples::float8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&est)
	if err != nil {
		return tp, fmt.Errorf("row estimate of %s.%s: %w", t.Schema, t.Name, err)
	}
	if est > 0 { // -1: never vacuumed or analyzed
		tp.Estimate = int64(est)
	}
	tp.Ranges = []rangeProgress{{}}
	if len(key) == 0 || maxRanges < 2 {
		return tp, nil
	}
	want := maxRanges // no estimate (never analyzed): it may be large
	if tp.Estimate > 0 {
		if tp.Estimate < int64(2*chunkRows) {
			return tp, nil
		}
		want = min(maxRanges, int(tp.Estimate/int64(chunkRows)))
	}
	var splits []string
	switch key[0].OID {
	case oidInt2, oidInt4, oidInt8, oidUUID:
		var hist *string
		err := conn.QueryRow(ctx, `SELECT histogram_bounds::text FROM pg_stats
			WHERE schemaname = $1 AND tablename = $2 AND attname = $3`, t.Schema, t.Name, key[0].Name).Scan(&hist)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return tp, fmt.Errorf("statistics of %s.%s: %w", t.Schema, t.Name, err)
		}
		if hist != nil {
			splits = histogramSplits(*hist, key[0].OID != oidUUID, want)
		} else if key[0].OID != oidUUID {
			var lo, hi *int64
			q := fmt.Sprintf("SELECT min(%[1]s)::int8, max(%[1]s)::int8 FROM %[2]s", pgx.Identifier{key[0].Name}.Sanitize(),
				pgx.Identifier{t.Schema, t.Name}.Sanitize())
			if err := conn.QueryRow(ctx, q).Scan(&lo, &hi); err != nil {
				return tp, fmt.Errorf("key bounds of %s.%s: %w", t.Schema, t.Name, err)
			}
			if lo != nil && hi != nil {
				splits = widthSplits(*lo, *hi, want)
			}
		}
	}
	tp.Ranges = rangesFrom(splits)
	return tp, nil
}

// histogramSplits picks up to n-1 split points, evenly spaced, from a
// pg_stats histogram ("{v1,v2,...}", equal-frequency bounds), sorted and
// distinct. Integers sort numerically, uuids (canonical lower-case text)
// as strings, which is their order.
func histogramSplits(hist string, integers bool, n int) []string {
	hist = strings.TrimSpace(hist)
	if len(hist) < 2 || hist[0] != '{' || hist[len(hist)-1] != '}' || n < 2 {
		return nil
	}
	vals := strings.Split(hist[1:len(hist)-1], ",")
	if integers {
		nums := make([]int64, 0, len(vals))
		for _, v := range vals {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil
			}
			nums = append(nums, x)
		}
		slices.Sort(nums)
		nums = slices.Compact(nums)
		vals = vals[:0]
		for _, x := range nums {
			vals = append(vals, strconv.FormatInt(x, 10))
		}
	} else {
		slices.Sort(vals)
		vals = slices.Compact(vals)
	}
	// The histogram's first and last bounds are the column's min and max:
	// interior bounds only.
	if len(vals) < 3 {
		return nil
	}
	inner := vals[1 : len(vals)-1]
	var out []string
	for i := 1; i < n; i++ {
		v := inner[(i*len(inner))/n]
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	return out
}

// widthSplits cuts [lo, hi] into n equal-width ranges.
func widthSplits(lo, hi int64, n int) []string {
	if n < 2 || hi <= lo {
		return nil
	}
	width := (float64(hi) - float64(lo)) / float64(n)
	var out []string
	last := lo
	for i := 1; i < n; i++ {
		v := int64(float64(lo) + width*float64(i))
		if v >= last && v < hi && (len(out) == 0 || v > last) {
			out = append(out, strconv.FormatInt(v, 10))
			last = v
		}
	}
	return out
}

// rangesFrom turns sorted split points s1 < s2 < ... into the ranges
// (-inf, s1], (s1, s2], ..., (sk, +inf), which together cover every value.
func rangesFrom(splits []string) []rangeProgress {
	out := make([]rangeProgress, 0, len(splits)+1)
	var lo *string
	for _, s := range splits {
		hi := s
		out = append(out, rangeProgress{Lo: lo, Hi: &hi})
		lo = &hi
	}
	return append(out, rangeProgress{Lo: lo})
}

// chunkQuery builds the keyset query for the next chunk of a range: the
// rows after the last key copied (or after the range's lower bound), up to
// the range's upper bound, in key order, at most limit of them. Parameters
// are text, cast to the key's types, so that a key value read back in text
// form goes in unchanged. Without a key it is the whole table.
func chunkQuery(sel selection, key []keyColumn, rg *rangeProgress, limit int) (string, [][]byte) {
	q := sel.from
	var conds []string
	if sel.filter != "" {
		conds = append(conds, sel.filter)
	}
	if len(key) == 0 {
		if len(conds) > 0 {
			q += " WHERE " + conds[0]
		}
		return q, nil
	}
	var args [][]byte
	param := func(v string, k keyColumn) string {
		args = append(args, []byte(v))
		return "$" + strconv.Itoa(len(args)) + "::" + k.Type
	}
	cols := make([]string, len(key))
	for i, k := range key {
		cols[i] = pgx.Identifier{k.Name}.Sanitize()
	}
	switch {
	case len(rg.After) == len(key):
		ps := make([]string, len(key))
		for i, k := range key {
			ps[i] = param(rg.After[i], k)
		}
		if len(key) == 1 {
			conds = append(conds, cols[0]+" > "+ps[0])
		} else {
			conds = append(conds, "("+strings.Join(cols, ", ")+") > ("+strings.Join(ps, ", ")+")")
		}
	case rg.Lo != nil:
		conds = append(conds, cols[0]+" > "+param(*rg.Lo, key[0]))
	}
	if rg.Hi != nil {
		conds = append(conds, cols[0]+" <= "+param(*rg.Hi, key[0]))
	}
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY " + strings.Join(cols, ", ") + " LIMIT " + strconv.Itoa(limit)
	return q, args
}
