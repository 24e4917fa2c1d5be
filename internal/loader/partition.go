package loader

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/ids"
)

// A truncate with a partition scope removes only the rows that were in one
// partition (truncated, detached or dropped at the source): the live rows
// of the shard below the truncate's version whose partition key satisfies
// the partition's bound at every level. The bound is PostgreSQL's own text
// (pg_get_expr of relpartbound), matched here against the key values
// stored in ClickHouse:
//   - range: FROM (lower, inclusive) TO (upper, exclusive), compared column
//     by column as PostgreSQL does (MINVALUE/MAXVALUE end the comparison);
//   - list: IN (values), NULL included when listed;
//   - hash: WITH (modulus m, remainder r), PostgreSQL's partition hash of
//     one bigint, integer, smallint or uuid column (internal/ids);
//   - DEFAULT: none of the siblings' bounds.
// Comparisons follow the column's type: integers and numeric as numbers,
// dates and timestamps as instants (ClickHouse keeps whole seconds, so a
// bound with a fraction of a second is refused rather than guessed), text
// byte-wise — PostgreSQL's order under the C collation; range bounds over
// text in another collation may differ and are documented as unsupported.

// cutPageRows is the page of eachCut: 50,000 key texts are a few MB.
const cutPageRows = 50_000

// eachCut calls fn, cutPage ids at a time, with the ids of shard's live
// rows in t below version cut that ev removes: every one for a TRUNCATE of
// the table or a snapshot end, those inside the partition's bound for a
// TRUNCATE of one partition (ev.Partition). Memory holds one page.
func (l *Loader) eachCut(ctx context.Context, t *chstore.Table, ev *envelope.Event, cut uint64, fn func(ids []string) error) error {
	if ev.Partition == nil {
		return l.store.EachLiveRow(ctx, t, uint16(ev.Shard), cut, nil, l.cutPage, func(ids []string, _ [][]*string) error { return fn(ids) })
	}
	m, err := compileScope(t, ev.Partition)
	if err != nil {
		return fmt.Errorf("truncate of partition %s of %s: %w", ev.Partition.Partition, t.Name, err)
	}
	var in []string
	return l.store.EachLiveRow(ctx, t, uint16(ev.Shard), cut, m.columns, l.cutPage, func(ids []string, values [][]*string) error {
		in = in[:0]
		for i, id := range ids {
			ok, err := m.match(values[i])
			if err != nil {
				return fmt.Errorf("truncate of partition %s of %s, row %s: %w", ev.Partition.Partition, t.Name, id, err)
			}
			if ok {
				in = append(in, id)
			}
		}
		return fn(in)
	})
}

// checkScope refuses a partition scope the loader cannot match exactly
// against t's stored rows (it would fail the same way on every retry).
func checkScope(t *chstore.Table, ev *envelope.Event) error {
	if ev.Partition == nil {
		return nil
	}
	if _, err := compileScope(t, ev.Partition); err != nil {
		return fmt.Errorf("truncate of partition %s of %s: %w", ev.Partition.Partition, t.Name, err)
	}
	return nil
}

// scopeMatcher tells whether a row's key values were in a partition.
type scopeMatcher struct {
	columns []string // every level's key columns, in order
	levels  []levelMatcher
}

type levelMatcher struct {
	cols     []int // indexes into the row's values
	types    []string
	bound    bound
	siblings []bound // for DEFAULT
}

func compileScope(t *chstore.Table, s *envelope.PartitionScope) (*scopeMatcher, error) {
	m := &scopeMatcher{}
	index := map[string]int{}
	for _, lv := range s.Levels {
		lm := levelMatcher{}
		for j, c := range lv.Columns {
			if c == "" {
				return nil, fmt.Errorf("a partition key expression is not supported (name columns in PARTITION BY)")
			}
			if t.Index(c) < 0 {
				return nil, fmt.Errorf("partition key column %q is not in ClickHouse", c)
			}
			// The reader's type of the column; a table read back from
			// ClickHouse (after a restart) knows no PostgreSQL types.
			typ := t.PGType(c)
			if j < len(lv.Types) && lv.Types[j] != "" {
				typ = lv.Types[j]
			}
			if typ == "" {
				return nil, fmt.Errorf("the PostgreSQL type of partition key column %q is unknown: the truncate came from a reader older than this loader, and no change of the table since the loader started told it (restart the loader after one)", c)
			}
			i, ok := index[c]
			if !ok {
				i = len(m.columns)
				index[c] = i
				m.columns = append(m.columns, c)
			}
			lm.cols, lm.types = append(lm.cols, i), append(lm.types, typ)
		}
		var err error
		if lm.bound, err = parseBound(lv.Strategy, lv.Bound); err != nil {
			return nil, err
		}
		for _, sb := range lv.Siblings {
			b, err := parseBound(lv.Strategy, sb)
			if err != nil {
				return nil, err
			}
			lm.siblings = append(lm.siblings, b)
		}
		for _, b := range append([]bound{lm.bound}, lm.siblings...) {
			if err := b.check(lm.types); err != nil {
				return nil, err
			}
		}
		m.levels = append(m.levels, lm)
	}
	return m, nil
}

func (m *scopeMatcher) match(vals []*string) (bool, error) {
	for _, lm := range m.levels {
		row := make([]*string, len(lm.cols))
		for i, c := range lm.cols {
			row[i] = vals[c]
		}
		in, err := lm.match(row)
		if err != nil || !in {
			return false, err
		}
	}
	return true, nil
}

func (lm levelMatcher) match(row []*string) (bool, error) {
	if !lm.bound.isDefault {
		return lm.bound.contains(row, lm.types)
	}
	for _, s := range lm.siblings {
		in, err := s.contains(row, lm.types)
		if err != nil || in {
			return false, err
		}
	}
	return true, nil
}

// boundValue is one literal of a bound: a value, NULL, MINVALUE or MAXVALUE.
type boundValue struct {
	text     string
	null     bool
	min, max bool
}

// bound is a parsed FOR VALUES clause.
type bound struct {
	isDefault bool
	strategy  string
	from, to  []boundValue // range
	in        []boundValue // list
	modulus   uint64       // hash
	remainder uint64
}

// check verifies that b's literals are values of types, as far as a
// match depends on it: instants in whole seconds, hash keys of a supported
// type.
func (b bound) check(types []string) error {
	if b.isDefault {
		return nil
	}
	if b.strategy == "h" {
		if len(types) != 1 {
			return fmt.Errorf("hash partitioning on %d columns is not supported (one bigint, integer, smallint or uuid column is)", len(types))
		}
		if _, err := rowHash(zeroOf(types[0]), types[0]); err != nil {
			return err
		}
		return nil
	}
	vals := append(append(append([]boundValue{}, b.from...), b.to...), b.in...)
	for i, v := range vals {
		typ := types[0]
		if b.strategy == "r" {
			if len(b.from) != len(types) || len(b.to) != len(types) {
				return fmt.Errorf("range bound of %d and %d values for %d key columns", len(b.from), len(b.to), len(types))
			}
			typ = types[i%len(types)]
		}
		if v.null || v.min || v.max {
			continue
		}
		if _, err := compareValue(v.text, v.text, typ); err != nil {
			return err
		}
	}
	return nil
}

func zeroOf(typ string) string {
	if typ == "uuid" {
		return "00000000-0000-0000-0000-000000000000"
	}
	return "0"
}

func (b bound) contains(row []*string, types []string) (bool, error) {
	switch b.strategy {
	case "r":
		// PostgreSQL routes a row with a NULL range key to the default
		// partition only.
		for _, v := range row {
			if v == nil {
				return false, nil
			}
		}
		lo, err := compareRow(row, b.from, types)
		if err != nil || lo < 0 {
			return false, err
		}
		hi, err := compareRow(row, b.to, types)
		return hi < 0, err
	case "l":
		for _, v := range b.in {
			if v.null {
				if row[0] == nil {
					return true, nil
				}
				continue
			}
			if row[0] == nil {
				continue
			}
			c, err := compareValue(*row[0], v.text, types[0])
			if err != nil || c == 0 {
				return err == nil, err
			}
		}
		return false, nil
	case "h":
		if len(row) != 1 {
			return false, fmt.Errorf("hash partitioning on %d columns is not supported (one bigint, integer, smallint or uuid column is)", len(row))
		}
		if row[0] == nil {
			// The hash of a NULL key is 0: remainder 0.
			return b.remainder == 0, nil
		}
		h, err := rowHash(*row[0], types[0])
		return err == nil && h%b.modulus == b.remainder, err
	}
	return false, fmt.Errorf("unknown partition strategy %q", b.strategy)
}

// compareRow compares a row's key with a range bound, column by column;
// MINVALUE and MAXVALUE decide the comparison where they appear.
func compareRow(row []*string, bnd []boundValue, types []string) (int, error) {
	if len(bnd) != len(row) {
		return 0, fmt.Errorf("range bound of %d values for %d key columns", len(bnd), len(row))
	}
	for i, v := range bnd {
		switch {
		case v.min:
			return 1, nil
		case v.max:
			return -1, nil
		}
		c, err := compareValue(*row[i], v.text, types[i])
		if err != nil || c != 0 {
			return c, err
		}
	}
	return 0, nil
}

// compareValue compares a stored value (ClickHouse's text) with a bound
// literal (PostgreSQL's text) as values of PostgreSQL type typ.
func compareValue(stored, lit, typ string) (int, error) {
	base := typ
	if i := strings.IndexByte(base, '('); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "smallint", "integer", "bigint":
		a, err1 := strconv.ParseInt(stored, 10, 64)
		b, err2 := strconv.ParseInt(lit, 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("compare %q with bound %q as %s", stored, lit, typ)
		}
		return cmp.Compare(a, b), nil
	case "numeric", "real", "double precision":
		a, err1 := decimal.NewFromString(stored)
		b, err2 := decimal.NewFromString(lit)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("compare %q with bound %q as %s", stored, lit, typ)
		}
		return a.Cmp(b), nil
	case "date", "timestamp with time zone", "timestamp without time zone", "timestamp":
		a, err1 := parseInstant(stored)
		b, err2 := parseInstant(lit)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("compare %q with bound %q as %s", stored, lit, typ)
		}
		if b.Nanosecond() != 0 {
			return 0, fmt.Errorf("bound %q has a fraction of a second, which ClickHouse does not keep", lit)
		}
		return a.Compare(b), nil
	case "uuid":
		return strings.Compare(strings.ToLower(stored), strings.ToLower(lit)), nil
	case "boolean":
		// ClickHouse keeps 1/0 (UInt8); PostgreSQL prints true/false.
		a, err1 := parseBool(stored)
		b, err2 := parseBool(lit)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("compare %q with bound %q as boolean", stored, lit)
		}
		return cmp.Compare(a, b), nil
	}
	return strings.Compare(stored, lit), nil
}

// parseInstant reads a date or timestamp as ClickHouse ("2026-01-31
// 23:59:59", UTC) or PostgreSQL under TimeZone UTC ("2026-02-01
// 00:00:00+00") prints it.
func parseInstant(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a date or timestamp: %q", s)
}

// rowHash is PostgreSQL's partition hash of one key value.
func rowHash(v, typ string) (uint64, error) {
	switch typ {
	case "smallint", "integer", "bigint":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("hash of %q as %s: %w", v, typ, err)
		}
		return ids.RowHashInt8(n), nil
	case "uuid":
		u, err := ids.ParseUUID(v)
		if err != nil {
			return 0, fmt.Errorf("hash of %q as uuid: %w", v, err)
		}
		return ids.RowHashUUID(u), nil
	}
	return 0, fmt.Errorf("hash partitioning on a %s column is not supported (bigint, integer, smallint or uuid is)", typ)
}

func parseBool(s string) (int64, error) {
	switch strings.ToLower(s) {
	case "1", "true", "t":
		return 1, nil
	case "0", "false", "f":
		return 0, nil
	}
	return 0, fmt.Errorf("not a boolean: %q", s)
}
