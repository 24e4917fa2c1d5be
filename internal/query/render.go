package query

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
)

// Values as PostgreSQL has them. A row's values are rendered so that each
// is its source value's PostgreSQL text (DateStyle ISO, TimeZone UTC), in
// the JSON type that carries it without loss:
//
//   - smallint, integer: JSON numbers; bigint: strings (exact in every
//     JSON reader);
//   - numeric(p,s): a string with exactly s fractional digits ("156.60");
//   - real, double precision: JSON numbers with PostgreSQL's digits
//     (shortest round-trip, exponent form as float4out/float8out print it),
//     "NaN", "Infinity" and "-Infinity" as strings;
//   - boolean: true or false;
//   - date: "2026-11-30";
//   - timestamp, timestamptz: RFC 3339 in UTC with the fractional digits
//     PostgreSQL prints (none for a whole second, at most six:
//     "2026-11-30T12:00:00.25Z"), read from the DateTime column and its
//     microseconds column (chstore.MicrosColumn), which is not shown;
//   - uuid: its canonical text;
//   - everything stored as String (text, char(n) with its padding,
//     varchar, json, jsonb, arrays, enums, unconstrained numeric, interval,
//     …): the PostgreSQL text itself.

// renderPlan says how the result columns of a read become a row.
type renderPlan struct {
	// micros[i] is the index of column i's microseconds column, or -1.
	micros []int
	// hidden[i]: column i is a microseconds column, folded into its
	// timestamp.
	hidden []bool
	// dates[i]: column i is a Date.
	dates []bool
}

// planRender reads the result's column names and types.
func planRender(cols []string, types []driver.ColumnType) renderPlan {
	p := renderPlan{micros: make([]int, len(cols)), hidden: make([]bool, len(cols)), dates: make([]bool, len(cols))}
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c] = i
		p.micros[i] = -1
	}
	for i, c := range cols {
		if ts, ok := chstore.MicrosOf(c); ok {
			if j, found := index[ts]; found && strings.Contains(types[j].DatabaseTypeName(), "DateTime") {
				p.micros[j], p.hidden[i] = i, true
			}
		}
		p.dates[i] = strings.TrimSuffix(strings.TrimPrefix(types[i].DatabaseTypeName(), "Nullable("), ")") == "Date"
	}
	return p
}

// value renders column i of a scanned row (dest holds the scanned values).
func (p renderPlan) value(i int, dest []any) any {
	v := reflect.ValueOf(dest[i]).Elem().Interface()
	if j := p.micros[i]; j >= 0 {
		t, ok := deref(v).(time.Time)
		if !ok {
			return nil
		}
		if us, ok := deref(reflect.ValueOf(dest[j]).Elem().Interface()).(uint32); ok {
			t = t.Add(time.Duration(us) * time.Microsecond)
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	if p.dates[i] {
		if t, ok := deref(v).(time.Time); ok {
			return t.Format("2006-01-02")
		}
	}
	return JSONValue(v)
}

// deref is v, or what it points to (nil for a nil pointer).
func deref(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return v
	}
	if rv.IsNil() {
		return nil
	}
	return rv.Elem().Interface()
}

// JSONValue turns a scanned ClickHouse value into what the API writes (see
// "Values as PostgreSQL has them" above); NULL is null. Without its
// column, a time is rendered as a DateTime alone (whole seconds) and a
// float as double precision.
func JSONValue(v any) any {
	v = deref(v)
	switch x := v.(type) {
	case nil:
		return nil
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case decimal.Decimal:
		// The driver gives a Decimal(p,s) value exponent -s: s digits, as
		// PostgreSQL prints numeric(p,s).
		return x.StringFixed(max(0, -x.Exponent()))
	case float64:
		return pgFloat(x, 64)
	case float32:
		return pgFloat(float64(x), 32)
	case uint8: // boolean, the only UInt8 source column
		return x != 0
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case uuid.UUID:
		return x.String()
	}
	return v
}

// pgFloat is f as PostgreSQL's float4out (bits 32) or float8out (64)
// prints it, as a JSON number — or as a string for NaN and the
// infinities, which JSON numbers cannot be.
func pgFloat(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return json.Number(PGFloatText(f, bits))
}

// PGFloatText is a finite f as PostgreSQL 12+ prints a real (bits 32) or a
// double precision (64) with the default extra_float_digits: the fewest
// digits that read back as the same value (Ryu), where a decimal exactly
// halfway between two floats does not count as reading back (PostgreSQL's
// Ryu takes the interval open; Go's shortest form accepts such a tie, so
// one value in a few hundred needs a digit more) — and in exponent form
// ("1e+20", "1.5e-05") when the decimal exponent is below -4 or at least
// 6 (real) or 15 (double precision), as printf's %g would.
func PGFloatText(f float64, bits int) string {
	s := strconv.FormatFloat(f, 'e', -1, bits)
	// prec digits after the point are prec+1 significant digits: one more
	// than the shortest form has, then more while still halfway.
	mant, _, _ := strings.Cut(s, "e")
	prec := len(strings.TrimLeft(strings.Replace(mant, ".", "", 1), "-"))
	for ; halfway(s, f, bits) && prec < 20; prec++ {
		s = strconv.FormatFloat(f, 'e', prec, bits)
	}
	mant, exps, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(exps)
	limit := 15 // DBL_DIG
	if bits == 32 {
		limit = 6 // FLT_DIG
	}
	if exp < -4 || exp >= limit {
		return s
	}
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	var out string
	switch {
	case exp < 0:
		out = "0." + strings.Repeat("0", -exp-1) + digits
	case exp+1 >= len(digits):
		out = digits + strings.Repeat("0", exp+1-len(digits))
	default:
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}

// halfway reports whether the decimal s lies exactly halfway between f
// and its neighbouring float of the given size on s's side.
func halfway(s string, f float64, bits int) bool {
	c, ok := new(big.Rat).SetString(s)
	if !ok {
		return false
	}
	v := new(big.Rat).SetFloat64(f)
	side := c.Cmp(v)
	if side == 0 {
		return false
	}
	var nb float64
	if bits == 32 {
		nb = float64(math.Nextafter32(float32(f), float32(math.Inf(side))))
	} else {
		nb = math.Nextafter(f, math.Inf(side))
	}
	if math.IsInf(nb, 0) {
		return false
	}
	mid := new(big.Rat).Add(v, new(big.Rat).SetFloat64(nb))
	return c.Cmp(mid.Quo(mid, big.NewRat(2, 1))) == 0
}
