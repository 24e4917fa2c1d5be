package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// valueKind is how values of one column are compared. It follows the
// ClickHouse type the loader stores the PostgreSQL type as, because that
// type decides what the API can print. The API prints every value as its
// PostgreSQL text in the JSON type that carries it (internal/query,
// render.go), so comparisons are exact: a source value is turned into the
// one JSON value the API must answer, and nothing is normalised beyond
// what the rendering itself defines (timestamps in UTC, booleans as
// true/false).
type valueKind int

const (
	kindText      valueKind = iota // String: the PostgreSQL text, byte for byte
	kindInt                        // Int16, Int32: a JSON number
	kindBigint                     // Int64: a decimal string (exact in every JSON reader)
	kindFloat                      // Float32, Float64: a JSON number with PostgreSQL's digits; NaN, ±Infinity as strings
	kindDecimal                    // numeric(p,s) as Decimal(p,s): the text, with its s fractional digits
	kindNumeric                    // other numeric: the text (String), or equal as a number (a Decimal chosen in the config)
	kindBool                       // UInt8: true or false
	kindDate                       // Date: "YYYY-MM-DD"
	kindTimestamp                  // DateTime('UTC') and its microseconds: RFC 3339 UTC, PostgreSQL's fractional digits
	kindUUID                       // UUID: a string
)

var kindNames = [...]string{"text", "integer", "bigint", "float", "decimal", "numeric", "boolean", "date", "timestamp", "uuid"}

func (k valueKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// kindOf maps a PostgreSQL type, as format_type() prints it (a domain
// resolved to its base type), to the way its values are compared. Types
// the loader refuses compare as text: a row of such a table never reaches
// the API, which the comparison then reports.
func kindOf(pgType string) valueKind {
	if strings.HasSuffix(pgType, "[]") {
		return kindText // arrays are stored as their PostgreSQL text
	}
	base, mod, _ := strings.Cut(pgType, "(") // "numeric(12,2)", "timestamp(3) with time zone"
	switch strings.TrimSpace(base) {
	case "smallint", "integer":
		return kindInt
	case "bigint":
		return kindBigint
	case "real", "double precision":
		return kindFloat
	case "numeric":
		var p, sc int
		if _, err := fmt.Sscanf(mod, "%d,%d)", &p, &sc); err == nil && p >= 1 && p <= 38 && sc >= 0 && sc <= p {
			return kindDecimal
		}
		if _, err := fmt.Sscanf(mod, "%d)", &p); err == nil && p >= 1 && p <= 38 {
			return kindDecimal
		}
		return kindNumeric
	case "boolean":
		return kindBool
	case "date":
		return kindDate
	case "timestamp with time zone", "timestamp without time zone", "timestamp":
		return kindTimestamp
	case "uuid":
		return kindUUID
	}
	return kindText
}

// errUnrepresentable marks a source value its ClickHouse type cannot hold.
var errUnrepresentable = errors.New("not representable in ClickHouse")

// pgTimestampLayouts are the ISO text forms of timestamp and timestamptz
// (DateStyle ISO): fractional seconds optional, offsets as +hh, +hh:mm or
// +hh:mm:ss, none for timestamp without time zone (read as UTC, as the
// loader does).
var pgTimestampLayouts = []string{
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999-07:00:00",
	"2006-01-02 15:04:05.999999999",
}

// The ranges of ClickHouse's Date and DateTime; the loader refuses values
// outside them.
var (
	minStored   = time.Unix(0, 0).UTC()
	maxDate     = minStored.AddDate(0, 0, math.MaxUint16)
	maxDateTime = time.Unix(math.MaxUint32, 999999999).UTC()
)

// sourceCanon returns the JSON value (string, json.Number or bool) the API
// must answer for a PostgreSQL text value of a column of kind k.
func sourceCanon(k valueKind, text string) (any, error) {
	switch k {
	case kindText, kindNumeric:
		return text, nil
	case kindInt:
		n, err := canonInt(text)
		return json.Number(n), err
	case kindBigint:
		return canonInt(text)
	case kindFloat:
		switch text {
		case "NaN", "Infinity", "-Infinity":
			return text, nil
		}
		if _, err := strconv.ParseFloat(text, 64); err != nil {
			return nil, fmt.Errorf("float %q: %w", text, err)
		}
		return json.Number(text), nil
	case kindDecimal:
		if _, err := decimal.NewFromString(text); err != nil {
			return nil, fmt.Errorf("numeric %q: %w", text, errUnrepresentable) // NaN
		}
		return text, nil
	case kindBool:
		switch text {
		case "t":
			return true, nil
		case "f":
			return false, nil
		}
		return nil, fmt.Errorf("boolean %q is neither t nor f", text)
	case kindDate:
		t, err := time.Parse("2006-01-02", text)
		if err != nil || t.Before(minStored) || t.After(maxDate) {
			return nil, fmt.Errorf("date %q: %w", text, errUnrepresentable)
		}
		return text, nil
	case kindTimestamp:
		for _, l := range pgTimestampLayouts {
			if t, err := time.Parse(l, text); err == nil {
				if t.Before(minStored) || t.After(maxDateTime) {
					break
				}
				return t.UTC().Format(time.RFC3339Nano), nil
			}
		}
		return nil, fmt.Errorf("timestamp %q: %w", text, errUnrepresentable)
	case kindUUID:
		return strings.ToLower(text), nil
	}
	return nil, fmt.Errorf("internal: unknown kind %d", k)
}

// jsonKind names the JSON type a column of kind k is answered in, for
// value (what sourceCanon gave).
func jsonKind(want any) string {
	switch want.(type) {
	case json.Number:
		return "a JSON number"
	case bool:
		return "a JSON boolean"
	}
	return "a JSON string"
}

// jsonType names the JSON type of a value decoded with UseNumber.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func canonInt(s string) (string, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return "", fmt.Errorf("integer %q: %w", s, err)
	}
	return strconv.FormatInt(n, 10), nil
}

// canonDecimal writes an exact decimal as coefficient "e" exponent with no
// trailing zeros in the coefficient, so that 12.50, 12.5 and 1.25E1 agree.
// It does not depend on shopspring/decimal's package-level print settings.
func canonDecimal(s string) (string, error) {
	if strings.EqualFold(s, "nan") || strings.Contains(strings.ToLower(s), "inf") {
		return "", fmt.Errorf("numeric %q: %w", s, errUnrepresentable)
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return "", fmt.Errorf("numeric %q: %w", s, err)
	}
	coef, exp := new(big.Int).Set(d.Coefficient()), d.Exponent()
	if coef.Sign() == 0 {
		return "0", nil
	}
	ten, rem := big.NewInt(10), new(big.Int)
	for {
		q, r := new(big.Int).QuoRem(coef, ten, rem)
		if r.Sign() != 0 {
			break
		}
		coef, exp = q, exp+1
	}
	return coef.String() + "e" + strconv.Itoa(int(exp)), nil
}

// equalValue reports whether a source value (nil: NULL) and an API value
// are the same value of a column of kind k. When they are not and there is
// more to say than "they differ" (a value that cannot be stored, an API
// value of the wrong JSON type), note says it.
func equalValue(k valueKind, src *string, api any) (equal bool, note string) {
	if src == nil || api == nil {
		return src == nil && api == nil, ""
	}
	want, err := sourceCanon(k, *src)
	if err != nil {
		return false, "source value: " + err.Error()
	}
	if jsonType(api) != jsonType(want) && (k != kindFloat || jsonType(api) != "a string") {
		return false, fmt.Sprintf("API value: want %s for a %s column, got %s", jsonKind(want), k, jsonType(api))
	}
	if api == want {
		return true, ""
	}
	if k == kindNumeric {
		// A numeric given a Decimal(P, S) in the table config shows S
		// digits, not the text's own: equal as numbers.
		a, aok := api.(string)
		x, err1 := canonDecimal(*src)
		y, err2 := canonDecimal(a)
		return aok && err1 == nil && err2 == nil && x == y, ""
	}
	return false, ""
}
