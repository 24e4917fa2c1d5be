package chstore

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/envelope"
)

// ErrUnmappedType is returned for a PostgreSQL type Tributary does not map to
// ClickHouse. The table that has such a column is stopped; the rest go on.
var ErrUnmappedType = errors.New("unmapped PostgreSQL type")

// kind is how a text value from PostgreSQL is converted for ClickHouse.
type kind int

const (
	kindString kind = iota
	kindInt16
	kindInt32
	kindInt64
	kindFloat64
	kindFloat32
	kindDecimal
	kindBool
	kindDate
	kindDateTime
	kindUUID
	// kindMicros is the microseconds within the second of a timestamp
	// column's value, kept in a column of its own (MicrosColumn): DateTime
	// holds whole seconds, and 18.16 has no DateTime64.
	kindMicros
)

// microsType is the ClickHouse side of a MicrosColumn.
var microsType = colType{kind: kindMicros, ch: "UInt32"}

// MicrosColumn is the name of the column that holds the microseconds
// within the second of timestamp column col ("_us_created_at" for
// created_at). col itself is a DateTime, so time windows, toDate and every
// other DateTime function work on it as before; a reader that wants the
// exact value adds the two (as the API does, internal/query/render.go).
func MicrosColumn(col string) string { return microsPrefix + col }

// MicrosOf is the timestamp column a MicrosColumn belongs to, if name is
// one.
func MicrosOf(name string) (col string, ok bool) {
	return strings.CutPrefix(name, microsPrefix)
}

const microsPrefix = "_us_"

// colType is the ClickHouse side of one mapped column.
type colType struct {
	kind kind
	// ch is the ClickHouse type, without Nullable.
	ch string
	// prec and scale are a Decimal's: convert refuses values they cannot
	// hold instead of letting the driver truncate them.
	prec, scale int
}

// decimalType is Decimal(p, s).
func decimalType(p, s int) colType {
	return colType{kind: kindDecimal, ch: fmt.Sprintf("Decimal(%d, %d)", p, s), prec: p, scale: s}
}

// ColumnTypes are the ClickHouse types the table config chooses for
// columns (tables.Table.ColumnTypes): by ClickHouse table, by column.
type ColumnTypes map[string]map[string]string

// mapColumn maps a source column to ClickHouse: the type the table config
// chooses for it (override, "" for none), or mapType's. Enums are their
// labels, as text. An unmapped type's error names the column, its type and
// the config line that would store it.
func mapColumn(table string, c envelope.Column, override string) (colType, error) {
	if override != "" {
		ct, err := chosenType(c.Type, override)
		if err != nil {
			return colType{}, fmt.Errorf("%w: table %s column %s (%s): column_types: %w", ErrUnmappedType, table, c.Name, c.Type, err)
		}
		return ct, nil
	}
	if c.Enum && !strings.HasSuffix(c.Type, "[]") {
		return colType{kind: kindString, ch: "String"}, nil
	}
	ct, err := mapType(c.Type)
	if err != nil {
		return colType{}, fmt.Errorf("table %s column %s: %w; to store its PostgreSQL text as it is, set \"column_types\": {%q: \"String\"} on table %s in the table config",
			table, c.Name, err, c.Name, table)
	}
	return ct, nil
}

// chosenType is the ClickHouse type a table config names for a column of
// PostgreSQL type pg: "String" for any type (its PostgreSQL text, exactly),
// or "Decimal(P, S)" for a numeric column (values that do not fit are
// refused, never rounded).
func chosenType(pg, ch string) (colType, error) {
	if ch == "String" {
		return colType{kind: kindString, ch: "String"}, nil
	}
	p, s, ok := ParseDecimalType(ch)
	if !ok {
		return colType{}, fmt.Errorf("%q is not a type Tributary stores (String, or Decimal(P, S) with 1 <= P <= 38, 0 <= S <= P)", ch)
	}
	if base, _, _ := strings.Cut(pg, "("); base != "numeric" {
		return colType{}, fmt.Errorf("%s is for numeric columns", ch)
	}
	return decimalType(p, s), nil
}

// ParseDecimalType reads "Decimal(P, S)" (spaces optional) with
// 1 <= P <= 38 and 0 <= S <= P: ClickHouse's decimals up to 128 bits, which
// 18.16 has.
func ParseDecimalType(ch string) (p, s int, ok bool) {
	norm := strings.ReplaceAll(ch, " ", "")
	rest, found := strings.CutPrefix(norm, "Decimal(")
	if !found || !strings.HasSuffix(rest, ")") {
		return 0, 0, false
	}
	ps, ss, found := strings.Cut(strings.TrimSuffix(rest, ")"), ",")
	if !found {
		return 0, 0, false
	}
	p, perr := strconv.Atoi(ps)
	s, serr := strconv.Atoi(ss)
	if perr != nil || serr != nil || p < 1 || p > 38 || s < 0 || s > p {
		return 0, 0, false
	}
	return p, s, true
}

// mapType maps a PostgreSQL type (format_type text, as in the envelope) to
// ClickHouse. The mapping is documented in schema/clickhouse.md ("PostgreSQL
// → ClickHouse types"), and a test holds the two in step.
func mapType(pg string) (colType, error) {
	if strings.HasSuffix(pg, "[]") {
		// Arrays travel as PostgreSQL array text ("{1,2,3}") and are stored
		// as that text: exact, and readable; typed arrays are future work.
		return colType{kind: kindString, ch: "String"}, nil
	}
	base := withoutModifier(pg)
	if strings.HasPrefix(base, "interval") {
		base = "interval" // "interval day to second"
	}
	switch base {
	case "smallint":
		return colType{kind: kindInt16, ch: "Int16"}, nil
	case "integer":
		return colType{kind: kindInt32, ch: "Int32"}, nil
	case "bigint":
		return colType{kind: kindInt64, ch: "Int64"}, nil
	case "real":
		return colType{kind: kindFloat32, ch: "Float32"}, nil
	case "double precision":
		return colType{kind: kindFloat64, ch: "Float64"}, nil
	case "numeric":
		if p, s, ok := numericTypmod(pg); ok {
			return decimalType(p, s), nil
		}
		// No declared precision (or one no Decimal holds): the exact
		// PostgreSQL text, so that every value fits and none is rounded;
		// the table config may choose a Decimal(P, S) instead.
		return colType{kind: kindString, ch: "String"}, nil
	case "boolean":
		return colType{kind: kindBool, ch: "UInt8"}, nil
	case "date":
		return colType{kind: kindDate, ch: "Date"}, nil
	case "timestamp with time zone", "timestamp without time zone", "timestamp":
		// ClickHouse 18.16 has no DateTime64: the whole seconds here, the
		// microseconds in the column's MicrosColumn (layout adds it).
		return colType{kind: kindDateTime, ch: "DateTime('UTC')"}, nil
	case "uuid":
		return colType{kind: kindUUID, ch: "UUID"}, nil
	case "text", "character varying", "character", "bpchar", `"char"`, "name", "json", "jsonb", "bytea",
		"inet", "cidr", "macaddr", "macaddr8", "interval", "time without time zone",
		"time with time zone", "money", "xml", "citext", "bit", "bit varying", "tsvector", "tsquery",
		"int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
		"point", "line", "lseg", "box", "path", "polygon", "circle", "pg_lsn", "jsonpath", "oid", "xid8":
		return colType{kind: kindString, ch: "String"}, nil
	}
	return colType{}, fmt.Errorf("%w: %q", ErrUnmappedType, pg)
}

// withoutModifier is a format_type name without its modifier:
// "time(3) with time zone" is "time with time zone".
func withoutModifier(pg string) string {
	for {
		i := strings.IndexByte(pg, '(')
		j := strings.IndexByte(pg, ')')
		if i < 0 || j < i {
			return pg
		}
		pg = pg[:i] + pg[j+1:]
	}
}

// numericTypmod reads "numeric(p,s)" and "numeric(p)" with a precision a
// Decimal holds (1..38) and a scale 0..p; ok is false otherwise
// (unconstrained numeric, a larger precision, PostgreSQL 15's negative
// scales).
func numericTypmod(pg string) (p, s int, ok bool) {
	if _, err := fmt.Sscanf(strings.ReplaceAll(pg, " ", ""), "numeric(%d,%d)", &p, &s); err != nil {
		if _, err2 := fmt.Sscanf(pg, "numeric(%d)", &p); err2 != nil {
			return 0, 0, false
		}
		s = 0
	}
	return p, s, p >= 1 && p <= 38 && s >= 0 && s <= p
}

// pgTimestampLayouts are the text forms PostgreSQL's output functions use
// with DateStyle ISO (the replication connection's default).
var pgTimestampLayouts = []string{
	"2006-01-02 15:04:05.999999-07",
	"2006-01-02 15:04:05.999999-07:00",
	"2006-01-02 15:04:05.999999-07:00:00",
	"2006-01-02 15:04:05.999999",
}

// convert turns PostgreSQL text into the Go value clickhouse-go appends.
// The typed parsers below are shared with Block, so both agree.
func (c colType) convert(s string) (any, error) {
	switch c.kind {
	case kindString, kindUUID:
		return s, nil
	case kindInt16:
		return parseInt16(s)
	case kindInt32:
		return parseInt32(s)
	case kindInt64:
		return parseInt64(s)
	case kindFloat64:
		return parseFloat64(s)
	case kindFloat32:
		return parseFloat32(s)
	case kindDecimal:
		return c.parseDecimal(s)
	case kindBool:
		v, err := parseBool(s)
		if err != nil {
			return nil, err
		}
		return v, nil
	case kindDate:
		return parseDateCH(s)
	case kindDateTime:
		v, err := parseDateTimeCH(s)
		if err != nil {
			return nil, err
		}
		return v, nil
	case kindMicros:
		return parseMicros(s)
	}
	return nil, fmt.Errorf("internal: unknown kind %d", c.kind)
}

func parseString(s string) (string, error) { return s, nil }

func parseInt16(s string) (int16, error) {
	v, err := strconv.ParseInt(s, 10, 16)
	return int16(v), err
}

func parseInt32(s string) (int32, error) {
	v, err := strconv.ParseInt(s, 10, 32)
	return int32(v), err
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

func parseFloat64(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// parseFloat32 reads a real: PostgreSQL prints the shortest text that reads
// back as the same float4, so this is exact.
func parseFloat32(s string) (float32, error) {
	v, err := strconv.ParseFloat(s, 32)
	return float32(v), err
}

// parseDecimal reads a numeric's text and refuses a value the column's
// Decimal(prec, scale) cannot hold (more fractional digits than scale that
// are not zeros, too many integer digits, NaN, ±Infinity): the driver would
// truncate it silently. Values of a numeric(p,s) column always fit; those
// of a numeric column given a Decimal in the table config may not.
func (c colType) parseDecimal(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return d, err
	}
	if intDigits, fracDigits, plain := plainDecimal(s); plain {
		// What PostgreSQL prints: checked on the text, with no allocation.
		if fracDigits > c.scale {
			return d, fmt.Errorf("%w: %s has more than %d fractional digits", errDoesNotFit, c.ch, c.scale)
		}
		if intDigits > c.prec-c.scale {
			return d, fmt.Errorf("%w: %s holds fewer than %d integer digits", errDoesNotFit, c.ch, c.prec-c.scale+1)
		}
		return d, nil
	}
	// Any other form NewFromString reads ("1e2"). Digits of the
	// coefficient, without sign: the checks below cost its length whatever
	// the exponent ("1e999999999" is refused, not computed).
	digits := strings.TrimPrefix(d.Coefficient().String(), "-")
	if digits == "0" {
		return d, nil
	}
	exp := int(d.Exponent())
	intDigits := len(digits) + exp
	if exp < 0 {
		zeros := len(digits) - len(strings.TrimRight(digits, "0"))
		if -exp > c.scale && -exp-c.scale > zeros {
			return d, fmt.Errorf("%w: %s has more than %d fractional digits", errDoesNotFit, c.ch, c.scale)
		}
	}
	if intDigits > c.prec-c.scale {
		return d, fmt.Errorf("%w: %s holds fewer than %d integer digits", errDoesNotFit, c.ch, c.prec-c.scale+1)
	}
	return d, nil
}

// plainDecimal reads "-123.4500" (sign, digits, at most one point) and
// says how many integer digits it has without leading zeros and how many
// fractional digits without trailing zeros; plain is false for any other
// form.
func plainDecimal(s string) (intDigits, fracDigits int, plain bool) {
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if intPart == "" && frac == "" {
		return 0, 0, false
	}
	for _, part := range []string{intPart, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, 0, false
			}
		}
	}
	return len(strings.TrimLeft(intPart, "0")), len(strings.TrimRight(frac, "0")), true
}

// errDoesNotFit: a value its column's ClickHouse type cannot hold exactly.
var errDoesNotFit = errors.New("value does not fit")

func parseBool(s string) (uint8, error) {
	switch s {
	case "t":
		return 1, nil
	case "f":
		return 0, nil
	}
	return 0, fmt.Errorf("boolean %q", s)
}

func parseDate(s string) (time.Time, error) { return time.Parse("2006-01-02", s) }

// The ranges of ClickHouse's Date (UInt16 days) and DateTime (UInt32
// seconds) since 1970-01-01 UTC; the driver does not refuse a value outside
// them, it wraps it.
var (
	minDate     = time.Unix(0, 0).UTC()
	maxDate     = minDate.AddDate(0, 0, math.MaxUint16)
	maxDateTime = time.Unix(math.MaxUint32, 0).UTC()
)

// parseDateCH is parseDate within Date's range.
func parseDateCH(s string) (time.Time, error) {
	t, err := parseDate(s)
	if err == nil && (t.Before(minDate) || t.After(maxDate)) {
		err = fmt.Errorf("%w: ClickHouse's Date holds %s to %s (choose \"String\" in column_types to keep every date)",
			errDoesNotFit, minDate.Format("2006-01-02"), maxDate.Format("2006-01-02"))
	}
	return t, err
}

// parseDateTimeCH is parseDateTime within DateTime's range.
func parseDateTimeCH(s string) (time.Time, error) {
	t, err := parseDateTime(s)
	if err == nil && (t.Before(minDate) || t.Truncate(time.Second).After(maxDateTime)) {
		err = fmt.Errorf("%w: ClickHouse's DateTime holds %s to %s UTC (choose \"String\" in column_types to keep every timestamp)",
			errDoesNotFit, minDate.Format("2006-01-02 15:04:05"), maxDateTime.Format("2006-01-02 15:04:05"))
	}
	return t, err
}

// parseMicros is the microseconds within the second of a timestamp's text
// (PostgreSQL keeps microseconds).
func parseMicros(s string) (uint32, error) {
	t, err := parseDateTime(s)
	return uint32(t.Nanosecond() / 1000), err
}

func parseDateTime(s string) (time.Time, error) {
	if t, ok := isoTimestamp(s); ok {
		return t, nil
	}
	return parseDateTimeLayouts(s)
}

// parseDateTimeLayouts is parseDateTime by time.Parse alone: what
// isoTimestamp must agree with.
func parseDateTimeLayouts(s string) (time.Time, error) {
	for _, l := range pgTimestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q not in ISO format", s)
}

// zero is the value stored in a non-nullable column for a delete tombstone.
func (c colType) zero() any {
	switch c.kind {
	case kindInt16:
		return int16(0)
	case kindInt32:
		return int32(0)
	case kindInt64:
		return int64(0)
	case kindFloat64:
		return float64(0)
	case kindFloat32:
		return float32(0)
	case kindDecimal:
		return decimal.Zero
	case kindBool:
		return uint8(0)
	case kindMicros:
		return uint32(0)
	case kindDate, kindDateTime:
		return time.Unix(0, 0).UTC()
	case kindUUID:
		return "00000000-0000-0000-0000-000000000000"
	}
	return ""
}

// literal is v (a value convert returned for c) as a ClickHouse literal of
// c's type, for a column's DEFAULT. Strings are quoted with every
// backslash and quote escaped; nothing else can carry text.
func (c colType) literal(v any) (string, error) {
	bad := func() (string, error) { return "", fmt.Errorf("value %v (%T) for a %s column", v, v, c.ch) }
	switch c.kind {
	case kindString, kindUUID:
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		if c.kind == kindUUID {
			return "toUUID(" + quoteString(s) + ")", nil
		}
		return quoteString(s), nil
	case kindInt16, kindInt32, kindInt64, kindBool, kindMicros:
		switch x := v.(type) {
		case int16, int32, int64, uint8, uint32:
			return fmt.Sprint(x), nil
		}
	case kindFloat64, kindFloat32:
		f, ok := v.(float64)
		fn, bits := "toFloat64", 64
		if f32, is32 := v.(float32); is32 {
			f, ok, fn, bits = float64(f32), c.kind == kindFloat32, "toFloat32", 32
		}
		if ok {
			text := strconv.FormatFloat(f, 'g', -1, bits)
			switch {
			case math.IsInf(f, 1):
				text = "inf" // ClickHouse refuses "+Inf"
			case math.IsInf(f, -1):
				text = "-inf"
			case math.IsNaN(f):
				text = "nan"
			}
			return fn + "(" + quoteString(text) + ")", nil
		}
	case kindDecimal:
		if d, ok := v.(decimal.Decimal); ok {
			p, sc := c.prec, c.scale
			fn := "toDecimal128"
			if p <= 9 {
				fn = "toDecimal32"
			} else if p <= 18 {
				fn = "toDecimal64"
			}
			return fmt.Sprintf("%s(%s, %d)", fn, quoteString(d.StringFixed(int32(sc))), sc), nil
		}
	case kindDate:
		if t, ok := v.(time.Time); ok {
			return "toDate(" + quoteString(t.Format("2006-01-02")) + ")", nil
		}
	case kindDateTime:
		if t, ok := v.(time.Time); ok {
			return "toDateTime(" + quoteString(t.UTC().Format("2006-01-02 15:04:05")) + ", 'UTC')", nil
		}
	}
	return bad()
}

// fromCHText parses ClickHouse's text form of a value of c's type (toString
// of a column default) into the value convert would give.
func (c colType) fromCHText(s string) (any, error) {
	switch c.kind {
	case kindBool:
		v, err := strconv.ParseUint(s, 10, 8)
		return uint8(v), err
	case kindMicros:
		v, err := strconv.ParseUint(s, 10, 32)
		return uint32(v), err
	case kindFloat64:
		return strconv.ParseFloat(s, 64) // "inf", "-inf", "nan" included
	case kindFloat32:
		return parseFloat32(s)
	case kindDateTime:
		t, err := time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
		return t, err
	}
	return c.convert(s)
}

// quoteString is s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// isoTimestamp reads the one text form PostgreSQL prints in nearly every
// change, "2026-11-30 12:00:00[.123456][+01[:30[:15]]]", in UTC, an order
// of magnitude faster than time.Parse (which was half of a row's
// conversion). It accepts only values it is certain time.Parse with
// pgTimestampLayouts accepts (ok false for anything else, which then takes
// that path), and returns the same instant: a fuzz test holds it to that.
func isoTimestamp(s string) (time.Time, bool) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digitsOf(s[0:4])
	month, ok2 := digitsOf(s[5:7])
	day, ok3 := digitsOf(s[8:10])
	hour, ok4 := digitsOf(s[11:13])
	minute, ok5 := digitsOf(s[14:16])
	sec, ok6 := digitsOf(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	rest := s[19:]
	nsec := 0
	if len(rest) > 0 && rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 || n > 10 { // no digits, or more than nanoseconds
			return time.Time{}, false
		}
		f, _ := digitsOf(rest[1:n])
		for i := n; i <= 9; i++ {
			f *= 10
		}
		nsec, rest = f, rest[n:]
	}
	offset := 0
	if len(rest) > 0 {
		// "+01", "+01:30", "+01:30:15" (or '-'): the three zone layouts.
		if (rest[0] != '+' && rest[0] != '-') || (len(rest) != 3 && len(rest) != 6 && len(rest) != 9) {
			return time.Time{}, false
		}
		for i := 3; i < len(rest); i += 3 {
			if rest[i] != ':' {
				return time.Time{}, false
			}
		}
		parts := [3]int{}
		for i := 0; 3*i+1 < len(rest); i++ {
			v, ok := digitsOf(rest[3*i+1 : 3*i+3])
			if !ok {
				return time.Time{}, false
			}
			parts[i] = v
		}
		if parts[0] > 23 || parts[1] > 59 || parts[2] > 59 {
			return time.Time{}, false
		}
		offset = parts[0]*3600 + parts[1]*60 + parts[2]
		if rest[0] == '-' {
			offset = -offset
		}
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), true
}

// digitsOf parses ASCII decimal digits only (no sign).
func digitsOf(s string) (int, bool) {
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// daysIn is the number of days of month in year (proleptic Gregorian, as
// time.Date).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
