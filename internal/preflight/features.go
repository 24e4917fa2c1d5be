package preflight

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/ids"
	"github.com/tributary/tributary/internal/tables"
)

// features checks the columns the revenue, moves and search sections name:
// they exist in their table, with types the feature can use.
func (c *shardCheck) features(tabs map[string]*table) {
	cfg := c.cfg.Tables
	for _, t := range cfg.Tables {
		if t.Search == nil || tabs[t.Name] == nil {
			continue
		}
		tab := tabs[t.Name]
		c.requireColumn(t.Name, tab, "search.time_column", t.Search.TimeColumn, kindTime)
		if t.Search.TitleColumn != "" {
			c.requireColumn(t.Name, tab, "search.title_column", t.Search.TitleColumn, kindText)
		}
		if t.Search.WorkspaceColumn != "" {
			c.requireColumn(t.Name, tab, "search.workspace_column", t.Search.WorkspaceColumn, nil)
		}
	}
	if r := cfg.Revenue; r != nil && tabs[r.Table] != nil {
		tab := tabs[r.Table]
		amount, ok := c.requireColumn(r.Table, tab, "revenue.amount_column", r.AmountColumn, kindNumeric)
		if r.RefundedAmountColumn != "" {
			refunded, rok := c.requireColumn(r.Table, tab, "revenue.refunded_amount_column", r.RefundedAmountColumn, kindNumeric)
			if ok && rok && scale(refunded.typ) != scale(amount.typ) {
				c.add(r.Table, "revenue.refunded_amount_column", "column %s is %s, the amount %s is %s: the scales must agree",
					r.RefundedAmountColumn, refunded.typ, r.AmountColumn, amount.typ)
			}
		}
		c.requireColumn(r.Table, tab, "revenue.time_column", r.TimeColumn, kindTime)
		for _, col := range []struct{ field, name string }{
			{"revenue.currency_column", r.CurrencyColumn}, {"revenue.status_column", r.StatusColumn},
		} {
			if col.name != "" {
				c.requireColumn(r.Table, tab, col.field, col.name, kindLabel)
			}
		}
		if r.WorkspaceColumn != "" {
			c.requireColumn(r.Table, tab, "revenue.workspace_column", r.WorkspaceColumn, nil)
		}
	}
	if m := cfg.Moves; m != nil && tabs[m.Table] != nil {
		tab := tabs[m.Table]
		want := kinds(nil)
		if docs, ok := cfg.ByName(m.DocumentsTable); ok {
			want = idKinds(docs.IDLayout)
		}
		c.requireColumn(m.Table, tab, "moves.document_column", m.DocumentColumn, want)
		for _, col := range []struct{ field, name string }{
			{"moves.from_shard_column", m.FromShardColumn}, {"moves.to_shard_column", m.ToShardColumn},
		} {
			if col.name != "" {
				c.requireColumn(m.Table, tab, col.field, col.name, kindInteger)
			}
		}
		c.requireColumn(m.Table, tab, "moves.state_column", m.StateColumn, kindText)
		c.requireColumn(m.Table, tab, "moves.started_column", m.StartedColumn, kindTime)
		if m.FinishedColumn != "" {
			c.requireColumn(m.Table, tab, "moves.finished_column", m.FinishedColumn, kindTime)
		}
		for _, col := range []struct{ field, name string }{
			{"moves.from_workspace_column", m.FromWorkspaceColumn}, {"moves.to_workspace_column", m.ToWorkspaceColumn},
		} {
			if col.name != "" {
				c.requireColumn(m.Table, tab, col.field, col.name, nil)
			}
		}
	}
}

// scale is the s of numeric(p,s) ("" for anything else).
func scale(typ string) string {
	var p, s int
	if _, err := fmt.Sscanf(typ, "numeric(%d,%d)", &p, &s); err != nil {
		return ""
	}
	return fmt.Sprint(s)
}

// sampleIDs decodes a sample of t's ids under its id_layout and, for
// layouts that name a shard, checks that they name this one: most rows of
// a shard were created there (a moved row keeps the id its first shard
// gave it, so a few others are normal).
func (c *shardCheck) sampleIDs(ctx context.Context, t *tables.Table, tab *table) {
	layout, err := ids.Lookup(t.IDLayout)
	if err != nil {
		c.add(t.Name, "id_layout", "%v", err) // tables.Validate refuses this already
		return
	}
	rows, err := c.conn.Query(ctx, fmt.Sprintf("SELECT %[1]s::text FROM %[2]s WHERE %[1]s IS NOT NULL LIMIT %[3]d",
		pgx.Identifier{t.IDColumn}.Sanitize(), pgx.Identifier{t.Schema, t.Name}.Sanitize(), c.cfg.Sample))
	if err != nil {
		c.add(t.Name, "id_column", "read a sample of ids: %v", err)
		return
	}
	defer rows.Close()
	var n, bad, here int
	named := map[int]int{}
	var firstBad string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			c.add(t.Name, "id_column", "read a sample of ids: %v", err)
			return
		}
		n++
		d, err := layout.Decode(id)
		if err != nil {
			if bad++; bad == 1 {
				firstBad = fmt.Sprintf("%s: %v", id, err)
			}
			continue
		}
		if d.HasShard {
			named[d.Shard]++
			if d.Shard == c.shard.Number {
				here++
			}
		}
	}
	if err := rows.Err(); err != nil {
		c.add(t.Name, "id_column", "read a sample of ids: %v", err)
		return
	}
	if bad > 0 {
		c.add(t.Name, "id_layout", "%d of %d sampled ids do not decode as %s (first: %s): is id_layout right?", bad, n, t.IDLayout, firstBad)
	}
	if decoded := n - bad; len(named) > 0 && here*2 < decoded {
		c.add(t.Name, "id_layout", "%d of %d sampled ids name this shard under %s (%s): the fleet file numbers this shard differently from its ids, or id_layout is wrong",
			here, decoded, t.IDLayout, namedShards(named))
	}
}

// namedShards lists how many ids named each shard: "shard 0: 2, shard 1: 18".
func namedShards(named map[int]int) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(named)) {
		parts = append(parts, fmt.Sprintf("shard %d: %d", s, named[s]))
	}
	return strings.Join(parts, ", ")
}
