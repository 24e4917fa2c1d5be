package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// valueKind is how values of one column are compared. It follows the
// ClickHouse type the loader stores the PostgreSQL type as, because that
// type decides what the API can print.
type valueKind int

const (
	kindText      valueKind = iota // String: the PostgreSQL text, byte for byte
	kindInt                        // Int16, Int32: a JSON number
	kindBigint                     // Int64: a decimal string (exact in every JSON reader)
	kindFloat                      // Float64: a JSON number
	kindDecimal                    // Decimal(p,s): a decimal string
	kindBool                       // UInt8: the JSON number 0 or 1
	kindDate                       // Date: RFC 3339 string, midnight UTC
	kindTimestamp                  // DateTime('UTC'): RFC 3339 string, seconds
	kindUUID                       // UUID: a string
)

var kindNames = [...]string{"text", "integer", "bigint", "float", "decimal", "boolean", "date", "timestamp", "uuid"}

func (k valueKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// kindOf maps a PostgreSQL type, as format_type() prints it, to the way its
// values are compared. Types the loader refuses compare as text: a row of
// such a table never reaches the API, which the comparison then reports.
func kindOf(pgType string) valueKind {
	if strings.HasSuffix(pgType, "[]") {
		return kindText // arrays are stored as their PostgreSQL text
	}
	base, _, _ := strings.Cut(pgType, "(") // "numeric(12,2)", "timestamp(3) with time zone"
	switch strings.TrimSpace(base) {
	case "smallint", "integer":
		return kindInt
	case "bigint":
		return kindBigint
	case "real", "double precision":
		return kindFloat
	case "numeric":
		return kindDecimal
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

// sourceCanon returns the comparable form of a PostgreSQL text value of a
// column of kind k.
func sourceCanon(k valueKind, text string) (string, error) {
	switch k {
	case kindText:
		return text, nil
	case kindInt, kindBigint:
		return canonInt(text)
	case kindFloat:
		return canonFloat(text)
	case kindDecimal:
		return canonDecimal(text)
	case kindBool:
		switch text {
		case "t":
			return "1", nil
		case "f":
			return "0", nil
		}
		return "", fmt.Errorf("boolean %q is neither t nor f", text)
	case kindDate:
		t, err := time.Parse("2006-01-02", text)
		if err != nil {
			return "", fmt.Errorf("date %q: %w", text, errUnrepresentable)
		}
		return t.Format("2006-01-02"), nil
	case kindTimestamp:
		for _, l := range pgTimestampLayouts {
			if t, err := time.Parse(l, text); err == nil {
				// ClickHouse DateTime holds seconds; the loader truncates.
				return t.UTC().Truncate(time.Second).Format(time.RFC3339), nil
			}
		}
		return "", fmt.Errorf("timestamp %q: %w", text, errUnrepresentable)
	case kindUUID:
		return strings.ToLower(text), nil
	}
	return "", fmt.Errorf("internal: unknown kind %d", k)
}

// apiCanon returns the comparable form of a JSON value the API returned
// (decoded with UseNumber) for a column of kind k. The JSON type is part of
// the API's contract (internal/query.JSONValue) and is checked too: a bigint
// or a decimal as a JSON number would lose digits in most JSON readers.
func apiCanon(k valueKind, v any) (string, error) {
	switch k {
	case kindInt, kindFloat, kindBool:
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("want a JSON number for a %s column, got %s", k, jsonType(v))
		}
		switch k {
		case kindInt:
			return canonInt(n.String())
		case kindFloat:
			return canonFloat(n.String())
		}
		if n != "0" && n != "1" {
			return "", fmt.Errorf("boolean %s is neither 0 nor 1", n)
		}
		return n.String(), nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a JSON string for a %s column, got %s", k, jsonType(v))
	}
	switch k {
	case kindText:
		return s, nil
	case kindUUID:
		return strings.ToLower(s), nil
	case kindBigint:
		return canonInt(s)
	case kindDecimal:
		return canonDecimal(s)
	case kindDate, kindTimestamp:
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return "", fmt.Errorf("%s %q: %w", k, s, err)
		}
		if k == kindDate {
			return t.UTC().Format("2006-01-02"), nil
		}
		return t.UTC().Format(time.RFC3339), nil
	}
	return "", fmt.Errorf("internal: unknown kind %d", k)
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

func canonFloat(s string) (string, error) {
	f, err := strconv.ParseFloat(s, 64) // also "NaN", "Infinity", "-Infinity"
	if err != nil {
		return "", fmt.Errorf("float %q: %w", s, err)
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
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
	got, err := apiCanon(k, api)
	if err != nil {
		return false, "API value: " + err.Error()
	}
	return want == got, ""
}
