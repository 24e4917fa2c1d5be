package verify

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// column is one source column.
type column struct {
	Name string
	Type string // format_type() text
	kind valueKind
}

func newColumn(name, pgType string) column {
	return column{Name: name, Type: pgType, kind: kindOf(pgType)}
}

// sourceRow is one live row read from a shard: values as PostgreSQL text
// in the order of cols, nil for NULL.
type sourceRow struct {
	cols   []column
	values []*string
}

// apiCopy is one copy of a row the API returned.
type apiCopy struct {
	Shard int
	// Row holds the JSON values by column, decoded with UseNumber.
	Row map[string]any
}

// compareID checks the API's copies of one id of table against the id's
// live source rows, by shard. It returns nil when they agree.
func compareID(table, id string, source map[int]*sourceRow, copies []apiCopy) []Difference {
	var diffs []Difference
	byShard := make(map[int]apiCopy, len(copies))
	for _, c := range copies {
		if _, dup := byShard[c.Shard]; dup {
			diffs = append(diffs, Difference{Kind: KindExtra, Table: table, ID: id, Shard: c.Shard,
				Detail: "the API returned two copies for this shard"})
			continue
		}
		byShard[c.Shard] = c
	}
	var missing, extra []int
	for s := range source {
		if _, ok := byShard[s]; !ok {
			missing = append(missing, s)
		}
	}
	for s := range byShard {
		if _, ok := source[s]; !ok {
			extra = append(extra, s)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	switch {
	case len(missing) > 0 && len(extra) > 0:
		diffs = append(diffs, Difference{Kind: KindWrongShard, Table: table, ID: id, Shard: missing[0],
			Source: "live on " + shardList(missing), API: "copies on " + shardList(extra)})
	default:
		for _, s := range missing {
			diffs = append(diffs, Difference{Kind: KindMissing, Table: table, ID: id, Shard: s,
				Detail: "live at the source, no copy in the API"})
		}
		for _, s := range extra {
			diffs = append(diffs, Difference{Kind: KindExtra, Table: table, ID: id, Shard: s,
				Detail: "the API has a copy, the shard has no such live row"})
		}
	}
	shards := make([]int, 0, len(source))
	for s := range source {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	for _, s := range shards {
		c, ok := byShard[s]
		if !ok {
			continue
		}
		diffs = append(diffs, compareRow(table, id, s, source[s], c.Row)...)
	}
	return diffs
}

// compareRow compares one copy's row with the source row, column by
// column in source order. Columns only the API has are ignored (a column
// dropped at the source stays in ClickHouse).
func compareRow(table, id string, shard int, src *sourceRow, row map[string]any) []Difference {
	var diffs []Difference
	for i, col := range src.cols {
		var sv *string
		if i < len(src.values) {
			sv = src.values[i]
		}
		av, present := row[col.Name]
		if !present {
			diffs = append(diffs, Difference{Kind: KindWrongValue, Table: table, ID: id, Shard: shard, Column: col.Name,
				Source: showSource(sv), API: "(absent)", Detail: "the API row has no such column"})
			continue
		}
		equal, note := equalValue(col.kind, sv, av)
		if equal {
			continue
		}
		d := Difference{Kind: KindWrongValue, Table: table, ID: id, Shard: shard, Column: col.Name, Detail: note}
		d.Source, d.API = showPair(sv, av)
		diffs = append(diffs, d)
	}
	return diffs
}

func shardList(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	if len(s) == 1 {
		return "shard " + parts[0]
	}
	return "shards " + strings.Join(parts, ",")
}

// maxShown is how much of a value a difference shows.
const maxShown = 120

func showSource(v *string) string {
	if v == nil {
		return "NULL"
	}
	return cut(strconv.Quote(*v), maxShown)
}

func showAPI(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return cut(string(b), maxShown)
}

// showPair shows both sides. Two long strings are shown around their first
// differing byte, with their lengths, so that a difference deep inside a
// large (TOASTed) value is visible.
func showPair(src *string, api any) (string, string) {
	as, ok := api.(string)
	if src == nil || !ok || (len(*src) <= maxShown && len(as) <= maxShown) {
		return showSource(src), showAPI(api)
	}
	s := *src
	i := 0
	for i < len(s) && i < len(as) && s[i] == as[i] {
		i++
	}
	from := max(0, i-20)
	window := func(v string) string {
		to := min(len(v), from+maxShown/2)
		out := strconv.Quote(v[from:to])
		if from > 0 {
			out = "…" + out
		}
		if to < len(v) {
			out += "…"
		}
		return fmt.Sprintf("%s (%d bytes)", out, len(v))
	}
	return window(s) + fmt.Sprintf(" first difference at byte %d", i), window(as)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}
