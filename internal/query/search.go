package query

// Search: the newest live rows of one table matching a workspace, a title
// substring and a time window, a page at a time.
//
// Order and pagination: rows are ordered by (time, id text, shard), all
// descending, which is a total order over live copies (the table's key is
// (id, _shard)), so keyset pagination — "strictly after the last row of the
// previous page in that order" — returns every matching row exactly once
// while nothing changes, whatever the page size. The id is compared as text
// so that the same code serves bigint and uuid ids; within one second of the
// time column ties are therefore broken by the id's text, then the shard.
// A row updated between two pages so that its time moves across the cursor
// can be seen twice or not at all: pages are consistent one by one, not as
// a snapshot.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/rowkey"
)

// MaxSearchLimit is the largest page SearchRequest.Limit may ask for.
const MaxSearchLimit = 500

// SearchKey is a row's position in the search order.
type SearchKey struct {
	// Time is the row's time column in UTC, whole seconds.
	Time time.Time
	// ID is the id column's text form (ClickHouse toString).
	ID    string
	Shard uint16
}

// SearchRequest is a validated search (the API checks user input; this
// type trusts it and binds every value). Column names come from the
// validated table configuration.
type SearchRequest struct {
	Table    string
	IDColumn string
	// IDColumns, when the table is identified by several columns, is its
	// key (IDColumn is then unused): results are ordered by each key
	// column's text, and SearchKey.ID is the key text (internal/rowkey).
	IDColumns []string
	// TimeColumn orders the results; From <= time < To bounds them (a zero
	// To is no upper bound). Both must be whole seconds.
	TimeColumn string
	From, To   time.Time
	// Workspace, when not empty, keeps rows whose WorkspaceColumn's text
	// form equals it.
	WorkspaceColumn string
	Workspace       string
	// Title, when not empty, keeps rows whose TitleColumn contains it,
	// case-insensitively (UTF-8).
	TitleColumn string
	Title       string
	// After, when set, keeps rows strictly after it in the search order
	// (the last row of the previous page).
	After *SearchKey
	// Limit is the page size, 1..MaxSearchLimit.
	Limit int
}

// SearchPage is one page of results.
type SearchPage struct {
	Rows []Copy
	// Keys[i] is the position of Rows[i].
	Keys []SearchKey
	// More reports that rows follow the last one.
	More bool
}

// Result column aliases; prefixed so that they cannot capture a column.
const (
	searchTimeAlias = "__search_time"
	searchIDAlias   = "__search_id"
)

// planSearch builds the query: FINAL with a plain WHERE, tombstones
// dropped, every request value bound.
func planSearch(db string, req SearchRequest) (string, []any) {
	t := "toDateTime(" + quote(req.TimeColumn) + ", 'UTC')"
	id := "toString(" + quote(req.IDColumn) + ")"
	where := []string{"_deleted = 0", t + " >= ?"}
	args := []any{req.From.UTC()}
	if !req.To.IsZero() {
		where = append(where, t+" < ?")
		args = append(args, req.To.UTC())
	}
	if req.Workspace != "" {
		where = append(where, "toString("+quote(req.WorkspaceColumn)+") = ?")
		args = append(args, req.Workspace)
	}
	if req.Title != "" {
		// A substring search, not a pattern: nothing in the title is
		// special, so there is nothing to escape.
		where = append(where, "positionCaseInsensitiveUTF8("+quote(req.TitleColumn)+", ?) > 0")
		args = append(args, req.Title)
	}
	limit := min(max(req.Limit, 1), MaxSearchLimit)
	if len(req.IDColumns) > 1 {
		return planKeySearch(db, req, t, where, args, limit)
	}
	if a := req.After; a != nil {
		// (t, id, _shard) < (a.Time, a.ID, a.Shard), spelled out: a NULL
		// time never reaches here (t >= From filtered it).
		where = append(where, fmt.Sprintf("(%[1]s < ? OR (%[1]s = ? AND (%[2]s < ? OR (%[2]s = ? AND _shard < ?))))", t, id))
		args = append(args, a.Time.UTC(), a.Time.UTC(), a.ID, a.ID, a.Shard)
	}
	sql := fmt.Sprintf("SELECT *, %s AS %s, %s AS %s FROM %s.%s FINAL WHERE %s ORDER BY %s DESC, %s DESC, _shard DESC LIMIT %d",
		t, searchTimeAlias, id, searchIDAlias, quote(db), quote(req.Table), strings.Join(where, " AND "),
		searchTimeAlias, searchIDAlias, limit+1)
	return sql, args
}

// planKeySearch is planSearch for a table identified by several columns:
// ordered by time, then each key column's text, then shard, with one
// alias per key column (searchIDAlias, searchIDAlias+"1", ...).
func planKeySearch(db string, req SearchRequest, t string, where []string, args []any, limit int) (string, []any) {
	terms := []string{t}
	aliases := []string{searchIDAlias}
	for i, c := range req.IDColumns {
		terms = append(terms, "toString("+quote(c)+")")
		if i > 0 {
			aliases = append(aliases, searchIDAlias+strconv.Itoa(i))
		}
	}
	if a := req.After; a != nil {
		parts, err := rowkey.Parse(a.ID, len(req.IDColumns))
		if err != nil {
			// The API checked the cursor; a key that does not parse
			// matches nothing rather than everything.
			return fmt.Sprintf("SELECT *, %s AS %s FROM %s.%s FINAL WHERE 0 LIMIT 0", t, searchTimeAlias, quote(db), quote(req.Table)), nil
		}
		vals := []any{a.Time.UTC()}
		for _, p := range parts {
			vals = append(vals, p)
		}
		// (terms..., _shard) < (vals..., a.Shard), spelled out.
		terms, vals = append(terms, "_shard"), append(vals, a.Shard)
		var or []string
		for i := range terms {
			var and []string
			for j := 0; j < i; j++ {
				and = append(and, terms[j]+" = ?")
				args = append(args, vals[j])
			}
			and = append(and, terms[i]+" < ?")
			args = append(args, vals[i])
			or = append(or, "("+strings.Join(and, " AND ")+")")
		}
		terms = terms[:len(terms)-1]
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	sel := []string{t + " AS " + searchTimeAlias}
	order := []string{searchTimeAlias + " DESC"}
	for i, a := range aliases {
		sel = append(sel, terms[i+1]+" AS "+a)
		order = append(order, a+" DESC")
	}
	sql := fmt.Sprintf("SELECT *, %s FROM %s.%s FINAL WHERE %s ORDER BY %s, _shard DESC LIMIT %d",
		strings.Join(sel, ", "), quote(db), quote(req.Table), strings.Join(where, " AND "), strings.Join(order, ", "), limit+1)
	return sql, args
}

// searchAliases are the result columns Search reads besides the row.
func searchAliases(req SearchRequest) []string {
	out := []string{searchTimeAlias, searchIDAlias}
	for i := 1; i < len(req.IDColumns); i++ {
		out = append(out, searchIDAlias+strconv.Itoa(i))
	}
	return out
}

// Search returns one page of req. It returns ErrUnknownTable when the
// loader has not created the table yet.
func (q *Queries) Search(ctx context.Context, req SearchRequest) (*SearchPage, error) {
	if req.From.Nanosecond() != 0 || req.To.Nanosecond() != 0 {
		return nil, ErrSubSecondBound
	}
	sql, args := planSearch(q.db, req)
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_move_to_prewhere": 0}))
	rows, err := q.conn.Query(ctx, sql, args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownTable, req.Table)
		}
		return nil, fmt.Errorf("search %s: %w", req.Table, err)
	}
	defer rows.Close()
	copies, extras, err := scanCopies(rows, searchAliases(req))
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", req.Table, err)
	}
	page := &SearchPage{}
	limit := min(max(req.Limit, 1), MaxSearchLimit)
	for i, c := range copies {
		if i == limit {
			page.More = true
			break
		}
		k, err := searchKey(extras[i], c.Shard)
		if err != nil {
			return nil, fmt.Errorf("search %s: %w", req.Table, err)
		}
		page.Rows = append(page.Rows, c)
		page.Keys = append(page.Keys, k)
	}
	return page, nil
}

// searchKey reads the time and id aliases of one result row.
func searchKey(ex []any, shard int) (SearchKey, error) {
	k := SearchKey{Shard: uint16(shard)}
	switch v := ex[0].(type) {
	case time.Time:
		k.Time = v.UTC()
	case *time.Time:
		if v == nil {
			return k, fmt.Errorf("NULL search time")
		}
		k.Time = v.UTC()
	default:
		return k, fmt.Errorf("search time scanned as %T", ex[0])
	}
	parts := make([]string, len(ex)-1)
	for i, e := range ex[1:] {
		switch v := e.(type) {
		case string:
			parts[i] = v
		case *string:
			if v == nil {
				return k, fmt.Errorf("NULL search id")
			}
			parts[i] = *v
		default:
			return k, fmt.Errorf("search id scanned as %T", e)
		}
	}
	k.ID = rowkey.Encode(parts)
	return k, nil
}
