package verify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// apiJSON decodes one JSON value the way the API client does.
func apiJSON(t testing.TB, text string) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("fixture %q: %v", text, err)
	}
	return v
}

func str(s string) *string { return &s }

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		pg   string
		want valueKind
	}{
		{"smallint", kindInt},
		{"integer", kindInt},
		{"bigint", kindBigint},
		{"numeric(12,2)", kindDecimal},
		{"numeric", kindNumeric},
		{"numeric(50,2)", kindNumeric},
		{"numeric(9)", kindDecimal},
		{"real", kindFloat},
		{"double precision", kindFloat},
		{"boolean", kindBool},
		{"date", kindDate},
		{"timestamp with time zone", kindTimestamp},
		{"timestamp(3) with time zone", kindTimestamp},
		{"timestamp without time zone", kindTimestamp},
		{"uuid", kindUUID},
		{"text", kindText},
		{"character varying(20)", kindText},
		{"jsonb", kindText},
		{"bytea", kindText},
		{"bigint[]", kindText}, // arrays are stored as text
		{"interval", kindText},
		{"time without time zone", kindText},
	} {
		if got := kindOf(c.pg); got != c.want {
			t.Errorf("kindOf(%q) = %s, want %s", c.pg, got, c.want)
		}
	}
}

// TestEqualValue: source text (as PostgreSQL prints it) against the API's
// JSON (as internal/query writes it), per PostgreSQL type. The false rows
// are what makes the verifier able to fail.
func TestEqualValue(t *testing.T) {
	for _, c := range []struct {
		name  string
		pg    string
		src   *string // nil: NULL
		api   string  // JSON text
		equal bool
		note  string // substring of the note, if any
	}{
		{"bigint as string", "bigint", str("734197815705617408"), `"734197815705617408"`, true, ""},
		{"bigint off by one", "bigint", str("734197815705617408"), `"734197815705617409"`, false, ""},
		{"bigint as JSON number breaks the contract", "bigint", str("5"), `5`, false, "want a JSON string"},
		{"integer", "integer", str("-42"), `-42`, true, ""},
		{"smallint wrong", "smallint", str("7"), `8`, false, ""},
		{"integer as string breaks the contract", "integer", str("7"), `"7"`, false, "want a JSON number"},

		{"numeric with its scale", "numeric(12,2)", str("12.50"), `"12.50"`, true, ""},
		{"numeric trailing zero dropped", "numeric(12,2)", str("12.50"), `"12.5"`, false, ""},
		{"numeric integral", "numeric(12,2)", str("100.00"), `"100"`, false, ""},
		{"numeric integral with its scale", "numeric(12,2)", str("100.00"), `"100.00"`, true, ""},
		{"numeric zero", "numeric(12,2)", str("0.00"), `"0"`, false, ""},
		{"numeric negative", "numeric(12,2)", str("-0.10"), `"-0.1"`, false, ""},
		{"numeric negative with its scale", "numeric(12,2)", str("-0.10"), `"-0.10"`, true, ""},
		{"unconstrained numeric as text", "numeric", str("1.50"), `"1.50"`, true, ""},
		{"unconstrained numeric NaN as text", "numeric", str("NaN"), `"NaN"`, true, ""},
		{"unconstrained numeric in a chosen Decimal", "numeric", str("1.5"), `"1.5000000000"`, true, ""},
		{"unconstrained numeric differs", "numeric", str("1.5"), `"1.5000000001"`, false, ""},
		{"unconstrained numeric NaN differs", "numeric", str("NaN"), `"0"`, false, ""},
		{"numeric scale is not dropped", "numeric(12,2)", str("100.00"), `"1"`, false, ""},
		{"numeric cent off", "numeric(12,2)", str("12.50"), `"12.51"`, false, ""},
		{"numeric NaN cannot be stored", "numeric(12,2)", str("NaN"), `"0"`, false, "not representable"},
		{"numeric as JSON number", "numeric(12,2)", str("1.5"), `1.5`, false, "want a JSON string"},

		{"double", "double precision", str("0.1"), `0.1`, true, ""},
		{"double exponent", "double precision", str("1e+21"), `1e+21`, true, ""},
		{"double digits are PostgreSQL's", "double precision", str("1e+21"), `1000000000000000000000`, false, ""},
		{"double NaN as a string", "double precision", str("NaN"), `"NaN"`, true, ""},
		{"double Infinity as a string", "double precision", str("-Infinity"), `"-Infinity"`, true, ""},
		{"double NaN as a number", "double precision", str("NaN"), `0`, false, "want a JSON string"},
		{"real", "real", str("3.14"), `3.14`, true, ""},
		{"double differs", "double precision", str("0.1"), `0.2`, false, ""},

		{"true", "boolean", str("t"), `true`, true, ""},
		{"false", "boolean", str("f"), `false`, true, ""},
		{"true vs false", "boolean", str("t"), `false`, false, ""},
		{"boolean as a number breaks the contract", "boolean", str("t"), `1`, false, "want a JSON boolean"},

		{"timestamptz truncated", "timestamp with time zone", str("2024-03-01 12:34:56.789+00"), `"2024-03-01T12:34:56Z"`, false, ""},
		{"timestamptz microseconds", "timestamp with time zone", str("2024-03-01 12:34:56.789012+00"), `"2024-03-01T12:34:56.789012Z"`, true, ""},
		{"timestamptz fraction", "timestamp with time zone", str("2024-03-01 12:34:56.5+00"), `"2024-03-01T12:34:56.5Z"`, true, ""},
		{"timestamptz fraction padded", "timestamp with time zone", str("2024-03-01 12:34:56.5+00"), `"2024-03-01T12:34:56.500Z"`, false, ""},
		{"timestamp before DateTime", "timestamp with time zone", str("1969-12-31 23:59:59+00"), `"1969-12-31T23:59:59Z"`, false, "not representable"},
		{"timestamptz not rounded", "timestamp with time zone", str("2024-03-01 12:34:56.789+00"), `"2024-03-01T12:34:57Z"`, false, ""},
		{"timestamptz offset", "timestamp with time zone", str("2024-03-01 14:34:56+02"), `"2024-03-01T12:34:56Z"`, true, ""},
		{"timestamptz half-hour offset", "timestamp with time zone", str("2024-03-01 18:04:56.1+05:30"), `"2024-03-01T12:34:56.1Z"`, true, ""},
		{"timestamp without zone is UTC", "timestamp without time zone", str("2024-03-01 12:34:56.5"), `"2024-03-01T12:34:56.5Z"`, true, ""},
		{"timestamptz a second off", "timestamp with time zone", str("2024-03-01 12:34:56+00"), `"2024-03-01T12:34:55Z"`, false, ""},
		{"timestamptz infinity", "timestamp with time zone", str("infinity"), `"1970-01-01T00:00:00Z"`, false, "not representable"},
		{"date", "date", str("2024-03-01"), `"2024-03-01"`, true, ""},
		{"date as a timestamp", "date", str("2024-03-01"), `"2024-03-01T00:00:00Z"`, false, ""},
		{"date off by a day", "date", str("2024-03-01"), `"2024-02-29"`, false, ""},
		{"date before Date", "date", str("1969-12-31"), `"1969-12-31"`, false, "not representable"},
		{"date BC", "date", str("0044-03-15 BC"), `"1970-01-01T00:00:00Z"`, false, "not representable"},

		{"uuid case", "uuid", str("0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"), `"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"`, true, ""},
		{"uuid differs", "uuid", str("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), `"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"`, false, ""},

		{"text", "text", str("héllo \"world\"\n"), `"héllo \"world\"\n"`, true, ""},
		{"char(n) keeps its padding", "character(5)", str("ab   "), `"ab   "`, true, ""},
		{"char(n) padding lost", "character(5)", str("ab   "), `"ab"`, false, ""},
		{"text case matters", "text", str("Hello"), `"hello"`, false, ""},
		{"text trailing space matters", "text", str("a "), `"a"`, false, ""},
		{"text as number", "text", str("1"), `1`, false, "want a JSON string"},
		{"array text", "integer[]", str("{1,2,3}"), `"{1,2,3}"`, true, ""},
		{"jsonb text", "jsonb", str(`{"a": 1}`), `"{\"a\": 1}"`, true, ""},

		{"NULL vs null", "text", nil, `null`, true, ""},
		{"NULL vs empty string", "text", nil, `""`, false, ""},
		{"empty string vs null", "text", str(""), `null`, false, ""},
		{"NULL bigint vs zero", "bigint", nil, `"0"`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			equal, note := equalValue(kindOf(c.pg), c.src, apiJSON(t, c.api))
			if equal != c.equal {
				t.Fatalf("equal = %t, want %t (note %q)", equal, c.equal, note)
			}
			if c.note != "" && !strings.Contains(note, c.note) {
				t.Fatalf("note %q does not mention %q", note, c.note)
			}
			if c.note == "" && note != "" {
				t.Fatalf("unexpected note %q", note)
			}
		})
	}
}

func TestCanonDecimal(t *testing.T) {
	for in, want := range map[string]string{
		"12.50":                             "125e-1",
		"12.5":                              "125e-1",
		"1.25E1":                            "125e-1",
		"100":                               "1e2",
		"100.000":                           "1e2",
		"-0.00":                             "0",
		"0":                                 "0",
		"-7.10":                             "-71e-1",
		"123456789012345678901234567890.12": "12345678901234567890123456789012e-2",
	} {
		got, err := canonDecimal(in)
		if err != nil || got != want {
			t.Errorf("canonDecimal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "NaN", "Infinity", "1.2.3", "abc"} {
		if got, err := canonDecimal(bad); err == nil {
			t.Errorf("canonDecimal(%q) = %q, want an error", bad, got)
		}
	}
}
