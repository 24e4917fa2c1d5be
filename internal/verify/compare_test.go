package verify

import (
	"strings"
	"testing"
)

// docCols is the shape of the demo's documents table.
var docCols = []column{
	newColumn("id", "bigint"),
	newColumn("workspace_id", "bigint"),
	newColumn("title", "text"),
	newColumn("body", "text"),
	newColumn("amount", "numeric(12,2)"),
	newColumn("created_at", "timestamp with time zone"),
}

// doc is a source row of docCols; body and amount may be NULL.
func doc(title string, body, amount *string) *sourceRow {
	return &sourceRow{cols: docCols, values: []*string{
		str("771571243957616640"), str("7"), str(title), body, amount, str("2026-11-30 13:38:54.123456+00"),
	}}
}

// docJSON is the API's row for doc, as JSON; override replaces columns.
func docJSON(t *testing.T, title string, body, amount string, override map[string]string) map[string]any {
	t.Helper()
	fields := map[string]string{
		"id": `"771571243957616640"`, "workspace_id": `"7"`, "title": title, "body": body, "amount": amount,
		"created_at": `"2026-11-30T13:38:54.123456Z"`,
	}
	for k, v := range override {
		if v == "" {
			delete(fields, k)
		} else {
			fields[k] = v
		}
	}
	row := map[string]any{}
	for k, v := range fields {
		row[k] = apiJSON(t, v)
	}
	return row
}

// want is the part of a Difference a case checks.
type want struct {
	kind   Kind
	shard  int
	column string
}

func TestCompareID(t *testing.T) {
	big := strings.Repeat("toast me ", 2000)
	good := func(t *testing.T) map[string]any {
		return docJSON(t, `"hello"`, `"`+big+`"`, `"12.50"`, nil)
	}
	src := doc("hello", &big, str("12.50"))
	for _, c := range []struct {
		name   string
		source map[int]*sourceRow
		copies func(t *testing.T) []apiCopy
		want   []want
	}{
		{
			name:   "equal",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}} },
		},
		{
			name:   "duplicate id on two shards, both returned",
			source: map[int]*sourceRow{0: src, 2: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}, {Shard: 2, Row: good(t)}} },
		},
		{
			name:   "NULLs",
			source: map[int]*sourceRow{1: doc("hello", nil, nil)},
			copies: func(t *testing.T) []apiCopy {
				return []apiCopy{{Shard: 1, Row: docJSON(t, `"hello"`, `null`, `null`, nil)}}
			},
		},
		{
			name:   "column only the API has is ignored",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy {
				return []apiCopy{{Shard: 0, Row: docJSON(t, `"hello"`, `"`+big+`"`, `"12.50"`, map[string]string{"dropped": `null`})}}
			},
		},
		{
			name:   "not found",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy { return nil },
			want:   []want{{KindMissing, 0, ""}},
		},
		{
			name:   "one copy of a duplicate missing",
			source: map[int]*sourceRow{0: src, 1: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}} },
			want:   []want{{KindMissing, 1, ""}},
		},
		{
			name:   "deleted at the source, still in the API",
			source: map[int]*sourceRow{},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 3, Row: good(t)}} },
			want:   []want{{KindExtra, 3, ""}},
		},
		{
			name:   "extra copy next to the right one",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}, {Shard: 2, Row: good(t)}} },
			want:   []want{{KindExtra, 2, ""}},
		},
		{
			name:   "same shard twice",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}, {Shard: 0, Row: good(t)}} },
			want:   []want{{KindExtra, 0, ""}},
		},
		{
			name:   "wrong shard",
			source: map[int]*sourceRow{1: src},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}} },
			want:   []want{{KindWrongShard, 1, ""}},
		},
		{
			name:   "wrong title",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy {
				return []apiCopy{{Shard: 0, Row: docJSON(t, `"corrupted"`, `"`+big+`"`, `"12.50"`, nil)}}
			},
			want: []want{{KindWrongValue, 0, "title"}},
		},
		{
			name:   "lost TOAST body and wrong amount",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy {
				return []apiCopy{{Shard: 0, Row: docJSON(t, `"hello"`, `null`, `"12.05"`, nil)}}
			},
			want: []want{{KindWrongValue, 0, "body"}, {KindWrongValue, 0, "amount"}},
		},
		{
			name:   "column missing from the API row",
			source: map[int]*sourceRow{0: src},
			copies: func(t *testing.T) []apiCopy {
				return []apiCopy{{Shard: 0, Row: docJSON(t, `"hello"`, `"`+big+`"`, `"12.50"`, map[string]string{"created_at": ""})}}
			},
			want: []want{{KindWrongValue, 0, "created_at"}},
		},
		{
			name:   "duplicate with one stale copy",
			source: map[int]*sourceRow{0: src, 1: doc("newer", &big, str("12.50"))},
			copies: func(t *testing.T) []apiCopy { return []apiCopy{{Shard: 0, Row: good(t)}, {Shard: 1, Row: good(t)}} },
			want:   []want{{KindWrongValue, 1, "title"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := compareID("documents", "771571243957616640", c.source, c.copies(t))
			if len(got) != len(c.want) {
				t.Fatalf("got %d differences, want %d: %v", len(got), len(c.want), got)
			}
			for i, w := range c.want {
				d := got[i]
				if d.Kind != w.kind || d.Shard != w.shard || d.Column != w.column || d.Table != "documents" || d.ID != "771571243957616640" {
					t.Errorf("difference %d = %v, want %+v", i, d, w)
				}
			}
		})
	}
}

func TestCompareIDShowsValues(t *testing.T) {
	src := doc("hello", nil, nil)
	got := compareID("documents", "1", map[int]*sourceRow{0: src},
		[]apiCopy{{Shard: 0, Row: docJSON(t, `"corrupted"`, `null`, `null`, nil)}})
	if len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	if got[0].Source != `"hello"` || got[0].API != `"corrupted"` {
		t.Fatalf("source %s api %s", got[0].Source, got[0].API)
	}
	line := got[0].String()
	for _, part := range []string{"wrong_value", "documents", "id 1", "shard 0", "column title", `"hello"`, `"corrupted"`} {
		if !strings.Contains(line, part) {
			t.Errorf("%q lacks %q", line, part)
		}
	}
}

func TestShowPairLongValues(t *testing.T) {
	a := strings.Repeat("x", 5000) + "A" + strings.Repeat("y", 3000)
	b := strings.Repeat("x", 5000) + "B" + strings.Repeat("y", 3000)
	s, api := showPair(&a, b)
	if !strings.Contains(s, "first difference at byte 5000") || !strings.Contains(s, "(8001 bytes)") {
		t.Errorf("source shown as %q", s)
	}
	if !strings.Contains(s, "A") || !strings.Contains(api, "B") || len(s) > 300 || len(api) > 300 {
		t.Errorf("window misses the difference or is too long: %q / %q", s, api)
	}
	s, api = showPair(nil, "x")
	if s != "NULL" || api != `"x"` {
		t.Errorf("NULL shown as %q / %q", s, api)
	}
}
