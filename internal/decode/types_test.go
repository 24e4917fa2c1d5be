package decode

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestTypeNameGolden compares TypeName with format_type(oid, typmod) as
// PostgreSQL 15 printed it (testdata/format_type.sql), modifiers included.
func TestTypeNameGolden(t *testing.T) {
	f, err := os.Open("testdata/format_type.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := map[uint32]bool{}
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			t.Fatalf("bad golden line %q", line)
		}
		oid, err1 := strconv.ParseUint(fields[0], 10, 32)
		mod, err2 := strconv.ParseInt(fields[1], 10, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad golden line %q", line)
		}
		got, ok := TypeName(uint32(oid), int32(mod))
		if !ok || got != fields[2] {
			t.Errorf("TypeName(%d, %d) = %q, %v; want %q", oid, mod, got, ok, fields[2])
		}
		seen[uint32(oid)] = true
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Every type of the table, and its array, is covered by the golden file.
	for _, b := range builtinTypes {
		if !seen[b.oid] || !seen[b.array] {
			t.Errorf("type %s (%d, array %d) not in the golden file", b.typname, b.oid, b.array)
		}
	}
	t.Logf("%d golden names", n)
}

func TestTypeNameUnknown(t *testing.T) {
	for _, tc := range []struct {
		oid    uint32
		typmod int32
	}{
		{0, -1},
		{27, -1},    // tid: not a column type worth naming
		{2249, -1},  // record: a pseudo-type
		{16385, -1}, // a user type
		{1186, 0},   // interval with an invalid range: PostgreSQL errors too
		{1186, 5<<16 | 0xffff},
		{1187, 1<<16 | 7}, // and its array
	} {
		if name, ok := TypeName(tc.oid, tc.typmod); ok {
			t.Errorf("TypeName(%d, %d) = %q, want unknown", tc.oid, tc.typmod, name)
		}
	}
}

// TestQuoteIdent against PostgreSQL 15's quote_ident().
func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{
		"mood": "mood", "Mood": `"Mood"`, "order": `"order"`, "user": `"user"`, "a b": `"a b"`,
		`x"y`: `"x""y"`, "_x": "_x", "1abc": `"1abc"`, "abc$": `"abc$"`, "ümlaut": `"ümlaut"`,
		"": `""`, "select": `"select"`, "name": "name", "int": `"int"`, "int4": "int4",
		"public": "public", "_cap_mood": "_cap_mood", "between": `"between"`, "verbose": `"verbose"`,
		"text": "text", "varchar": `"varchar"`, "time": `"time"`, "zone": "zone", "type": "type", "x1_": "x1_",
	} {
		if got := quoteIdent(in); got != want {
			t.Errorf("quoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}
