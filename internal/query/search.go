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
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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
	if a := req.After; a != nil {
		// (t, id, _shard) < (a.Time, a.ID, a.Shard), spelled out: a NULL
		// time never reaches here (t >= From filtered it).
		where = append(where, fmt.Sprintf("(%[1]s < ? OR (%[1]s = ? AND (%[2]s < ? OR (%[2]s = ? AND _shard < ?))))", t, id))
		args = append(args, a.Time.UTC(), a.Time.UTC(), a.ID, a.ID, a.Shard)
	}
	limit := min(max(req.Limit, 1), MaxSearchLimit)
	sql := fmt.Sprintf("SELECT *, %s AS %s, %s AS %s FROM %s.%s FINAL WHERE %s ORDER BY %s DESC, %s DESC, _shard DESC LIMIT %d",
		t, searchTimeAlias, id, searchIDAlias, quote(db), quote(req.Table), strings.Join(where, " AND "),
		searchTimeAlias, searchIDAlias, limit+1)
	return sql, args
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
		if isUnknownTable(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownTable, req.Table)
		}
		return nil, fmt.Errorf("search %s: %w", req.Table, err)
	}
	defer rows.Close()
	copies, extras, err := scanCopies(rows, []string{searchTimeAlias, searchIDAlias})
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
	switch v := ex[1].(type) {
	case string:
		k.ID = v
	case *string:
		if v == nil {
			return k, fmt.Errorf("NULL search id")
		}
		k.ID = *v
	default:
		return k, fmt.Errorf("search id scanned as %T", ex[1])
	}
	return k, nil
}

// isUnknownTable reports a query on a table ClickHouse does not have.
func isUnknownTable(err error) bool {
	return strings.Contains(err.Error(), "doesn't exist") || strings.Contains(err.Error(), "UNKNOWN_TABLE")
}
