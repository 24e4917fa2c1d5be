package tests

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// typeColumn is one column of the types table: its PostgreSQL type (%[1]s
// is the table name, for the test's own domains and enum) and a generator
// of input texts, limits first.
type typeColumn struct {
	name, typ string
	limits    []string
	random    func(r *rand.Rand) string
}

// typesDDL creates the test's domains and enum; %[1]s is the table name.
var typesDDL = []string{
	`CREATE DOMAIN %[1]s_email AS text CHECK (VALUE LIKE '%%@%%')`,
	`CREATE DOMAIN %[1]s_amount AS numeric(12,2)`,
	`CREATE DOMAIN %[1]s_amount2 AS %[1]s_amount CHECK (VALUE >= -1000000000)`,
	`CREATE TYPE %[1]s_mood AS ENUM ('happy', 'sad', 'it''s "ok"')`,
}

func typeColumns() []typeColumn {
	digits := func(r *rand.Rand, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + r.Intn(10))
		}
		return string(b)
	}
	sign := func(r *rand.Rand) string {
		if r.Intn(2) == 0 {
			return "-"
		}
		return ""
	}
	decimalText := func(r *rand.Rand, intDigits, fracDigits int) string {
		s := sign(r) + strings.TrimLeft(digits(r, 1+r.Intn(intDigits)), "0")
		if s == "" || s == "-" {
			s += "0"
		}
		if f := r.Intn(fracDigits + 1); f > 0 {
			s += "." + digits(r, f)
		}
		return s
	}
	text := func(r *rand.Rand, max int) string {
		alphabet := []rune("ab Z09'\"\\{},\n\t€ü😀%_")
		n := r.Intn(max + 1)
		out := make([]rune, n)
		for i := range out {
			out[i] = alphabet[r.Intn(len(alphabet))]
		}
		return string(out)
	}
	arrayOf := func(elems []string) string {
		parts := make([]string, len(elems))
		for i, e := range elems {
			if e == "\x00" {
				parts[i] = "NULL"
				continue
			}
			parts[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e) + `"`
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	stamp := func(r *rand.Rand, lo, hi int64, zone bool) string {
		t := time.Unix(lo+r.Int63n(hi-lo), 0).UTC()
		s := t.Format("2006-01-02 15:04:05")
		if f := r.Intn(7); f > 0 {
			s += "." + digits(r, f)
		}
		if zone {
			s += fmt.Sprintf("%+03d:%02d", r.Intn(27)-13, []int{0, 30, 45}[r.Intn(3)])
		}
		return s
	}
	const maxDateTime = 4294967295 - 1
	return []typeColumn{
		{"c_int2", "smallint", []string{"-32768", "32767", "0"}, func(r *rand.Rand) string { return strconv.Itoa(r.Intn(65536) - 32768) }},
		{"c_int4", "integer", []string{"-2147483648", "2147483647"}, func(r *rand.Rand) string { return strconv.Itoa(int(int32(r.Uint32()))) }},
		{"c_int8", "bigint", []string{"-9223372036854775808", "9223372036854775807"}, func(r *rand.Rand) string { return strconv.FormatInt(int64(r.Uint64()), 10) }},
		{"c_num", "numeric(14,2)", []string{"999999999999.99", "-999999999999.99", "156.6", "0", "0.01"},
			func(r *rand.Rand) string { return decimalText(r, 12, 2) }},
		{"c_num_free", "numeric", []string{"NaN", "Infinity", "-Infinity", "1.50", "0.000000000000000000000000000001",
			"123456789012345678901234567890123456789012.5", "-0.0", "1e-20"},
			func(r *rand.Rand) string { return decimalText(r, 30, 25) }},
		{"c_num_dec", "numeric", []string{"1.5", "1.5000000000", "-9999999999999999999999999999.9999999999", "0.0000000001"},
			func(r *rand.Rand) string { return decimalText(r, 28, 10) }},
		{"c_num_wide", "numeric(40,5)", []string{"99999999999999999999999999999999999.99999", "-1.00000"},
			func(r *rand.Rand) string { return decimalText(r, 35, 5) }},
		{"c_real", "real", []string{"3.4028235e+38", "-3.4028235e+38", "1e-45", "1.1754944e-38", "NaN", "Infinity",
			"-Infinity", "-0", "0.1", "1234567", "123456.7", "0.0001", "0.00001"},
			func(r *rand.Rand) string {
				f := math.Float32frombits(r.Uint32())
				if f != f {
					return "NaN"
				}
				return strconv.FormatFloat(float64(f), 'g', -1, 32)
			}},
		{"c_dbl", "double precision", []string{"1.7976931348623157e+308", "-1.7976931348623157e+308", "5e-324",
			"2.2250738585072014e-308", "NaN", "Infinity", "-Infinity", "-0", "0.1", "1e15", "123456789012345.6", "1e-5", "0.0001"},
			func(r *rand.Rand) string {
				f := math.Float64frombits(r.Uint64())
				if f != f {
					return "NaN"
				}
				return strconv.FormatFloat(f, 'g', -1, 64)
			}},
		{"c_bool", "boolean", []string{"t", "f"}, func(r *rand.Rand) string { return []string{"t", "f"}[r.Intn(2)] }},
		{"c_text", "text", []string{"", " ", `\`, "'", "NULL"}, func(r *rand.Rand) string { return text(r, 40) }},
		{"c_vchar", "varchar(20)", []string{"", strings.Repeat("€", 20)}, func(r *rand.Rand) string { return text(r, 20) }},
		{"c_char", "char(5)", []string{"", "ab", "abcde", "ü"}, func(r *rand.Rand) string { return strings.TrimRight(text(r, 5), " ") }},
		{"c_json", "json", []string{`{"a": 1,   "b" : [1, 2.50, null]}`, `[]`, `"x"`, `1e400`},
			func(r *rand.Rand) string {
				return fmt.Sprintf(`{"k%d":  %q, "n": %d.%d0}`, r.Intn(9), text(r, 5), r.Intn(100), r.Intn(10))
			}},
		{"c_jsonb", "jsonb", []string{`{"b": 1, "a": [1, 2.50, null]}`, `{}`, `12345678901234567890.100`},
			func(r *rand.Rand) string {
				return fmt.Sprintf(`{"k%d":  %q, "n": %d.%d0}`, r.Intn(9), text(r, 5), r.Intn(100), r.Intn(10))
			}},
		{"c_tarr", "text[]", []string{"{}", `{"NULL",NULL,""}`, `{{"a","b"},{"c","d"}}`},
			func(r *rand.Rand) string {
				el := make([]string, r.Intn(4))
				for i := range el {
					el[i] = text(r, 6)
					if r.Intn(5) == 0 {
						el[i] = "\x00"
					}
				}
				return arrayOf(el)
			}},
		{"c_iarr", "integer[]", []string{"{}", "{NULL,-2147483648,2147483647}", "{{1,2},{3,4}}", "[0:1]={7,8}"},
			func(r *rand.Rand) string { return fmt.Sprintf("{%d,%d}", int32(r.Uint32()), r.Intn(10)) }},
		{"c_date", "date", []string{"1970-01-01", "2149-06-06", "2000-02-29"},
			func(r *rand.Rand) string { return time.Unix(r.Int63n(65535*86400), 0).UTC().Format("2006-01-02") }},
		{"c_ts", "timestamp", []string{"1970-01-01 00:00:00", "2106-02-07 06:28:15.999999", "2026-11-30 12:00:00.5"},
			func(r *rand.Rand) string { return stamp(r, 0, maxDateTime, false) }},
		{"c_tstz", "timestamptz", []string{"1970-01-01 00:00:00+00", "2106-02-07 06:28:15.999999+00", "2026-11-30 12:00:00.000001+05:30"},
			func(r *rand.Rand) string { return stamp(r, 86400, maxDateTime-86400, true) }},
		{"c_ts3", "timestamptz(3)", []string{"2026-11-30 12:00:00.9995+00"},
			func(r *rand.Rand) string { return stamp(r, 86400, maxDateTime-86400, true) }},
		{"c_uuid", "uuid", []string{"00000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"},
			func(r *rand.Rand) string {
				b := make([]byte, 16)
				r.Read(b)
				h := hex.EncodeToString(b)
				return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
			}},
		{"c_interval", "interval", []string{"-178000000 years", "00:00:00.000001", "1 mon -1 days"},
			func(r *rand.Rand) string {
				return fmt.Sprintf("%d mons %d days %d:%02d:%02d.%d", r.Intn(30)-15, r.Intn(60)-30, r.Intn(48), r.Intn(60), r.Intn(60), r.Intn(1000000))
			}},
		{"c_time", "time", []string{"00:00:00", "24:00:00", "23:59:59.999999"},
			func(r *rand.Rand) string {
				return fmt.Sprintf("%02d:%02d:%02d.%d", r.Intn(24), r.Intn(60), r.Intn(60), r.Intn(1000))
			}},
		{"c_inet", "inet", []string{"::1", "0.0.0.0/0", "255.255.255.255"},
			func(r *rand.Rand) string {
				return fmt.Sprintf("%d.%d.%d.%d/%d", r.Intn(256), r.Intn(256), r.Intn(256), r.Intn(256), 8+r.Intn(25))
			}},
		{"c_bytea", "bytea", []string{`\x`, `\x00ff`},
			func(r *rand.Rand) string {
				b := make([]byte, r.Intn(20))
				r.Read(b)
				return `\x` + hex.EncodeToString(b)
			}},
		{"c_bpchar", "bpchar", []string{"", "a  b  "}, func(r *rand.Rand) string { return text(r, 8) }},
		{"c_char1", `"char"`, []string{"a", "\\"}, func(r *rand.Rand) string { return string(rune('a' + r.Intn(26))) }},
		{"c_name", "name", []string{strings.Repeat("n", 63)}, func(r *rand.Rand) string { return text(r, 20) }},
		{"c_xml", "xml", []string{"<a x=\"1\">t &amp; u</a>", "plain"}, func(r *rand.Rand) string { return fmt.Sprintf("<r n='%d'/>", r.Intn(99)) }},
		{"c_jsonpath", "jsonpath", []string{"$.a[*] ? (@ > 1)", "strict $.\"x y\""}, func(r *rand.Rand) string { return fmt.Sprintf("$.k%d[%d]", r.Intn(9), r.Intn(9)) }},
		{"c_macaddr", "macaddr", []string{"ff:ff:ff:ff:ff:ff", "08-00-2B-01-02-03"},
			func(r *rand.Rand) string {
				return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", r.Intn(256), r.Intn(256), r.Intn(256), r.Intn(256), r.Intn(256), r.Intn(256))
			}},
		{"c_macaddr8", "macaddr8", []string{"08:00:2b:01:02:03:04:05"}, func(r *rand.Rand) string { return fmt.Sprintf("%016x", r.Uint64()) }},
		{"c_money", "money", []string{"-92233720368547758.08", "92233720368547758.07", "0"}, func(r *rand.Rand) string { return decimalText(r, 12, 2) }},
		{"c_timetz", "timetz", []string{"00:00:00+15:59", "24:00:00-15:59"},
			func(r *rand.Rand) string {
				return fmt.Sprintf("%02d:%02d:%02d.%d%+03d", r.Intn(24), r.Intn(60), r.Intn(60), r.Intn(1000000), r.Intn(27)-13)
			}},
		{"c_bit", "bit(3)", []string{"000", "111"}, func(r *rand.Rand) string { return fmt.Sprintf("%03b", r.Intn(8)) }},
		{"c_varbit", "bit varying(5)", []string{"", "10101"}, func(r *rand.Rand) string { return fmt.Sprintf("%b", r.Intn(32)) }},
		{"c_lsn", "pg_lsn", []string{"0/0", "FFFFFFFF/FFFFFFFF"}, func(r *rand.Rand) string { return fmt.Sprintf("%X/%X", r.Uint32(), r.Uint32()) }},
		{"c_oid", "oid", []string{"0", "4294967295"}, func(r *rand.Rand) string { return strconv.FormatUint(uint64(r.Uint32()), 10) }},
		{"c_xid8", "xid8", []string{"0", "18446744073709551615"}, func(r *rand.Rand) string { return strconv.FormatUint(r.Uint64(), 10) }},
		{"c_tsvector", "tsvector", []string{"a:1 b:2A 'x y':3", ""}, func(r *rand.Rand) string { return fmt.Sprintf("w%d:%d z", r.Intn(9), 1+r.Intn(9)) }},
		{"c_tsquery", "tsquery", []string{"a & !b | c:*", "'x y'"}, func(r *rand.Rand) string { return fmt.Sprintf("w%d | v%d", r.Intn(9), r.Intn(9)) }},
		{"c_int4range", "int4range", []string{"empty", "(,)", "[-2147483648,2147483647)"}, func(r *rand.Rand) string { return fmt.Sprintf("[%d,%d]", r.Intn(10), 10+r.Intn(10)) }},
		{"c_int8range", "int8range", []string{"(1,2]"}, func(r *rand.Rand) string { return fmt.Sprintf("[%d,)", int64(r.Uint64()>>1)) }},
		{"c_numrange", "numrange", []string{"[1.50,2.500]", "(,0)"}, func(r *rand.Rand) string { return fmt.Sprintf("[%s,%s]", decimalText(r, 3, 3), "1000") }},
		{"c_tsrange", "tsrange", []string{"[2026-01-01 00:00:00.5,infinity)"}, func(r *rand.Rand) string { return "[" + stamp(r, 0, maxDateTime, false) + ",)" }},
		{"c_tstzrange", "tstzrange", []string{"[1970-01-01 00:00:00+00,infinity)"}, func(r *rand.Rand) string { return "[" + stamp(r, 86400, maxDateTime, true) + ",)" }},
		{"c_daterange", "daterange", []string{"[2000-01-01,2000-01-01]", "(,)"}, func(r *rand.Rand) string { return fmt.Sprintf("[2000-01-%02d,)", 1+r.Intn(28)) }},
		{"c_point", "point", []string{"(1e+300,-0)", "(0.1,2)"}, func(r *rand.Rand) string { return fmt.Sprintf("(%v,%v)", r.NormFloat64(), r.NormFloat64()) }},
		{"c_line", "line", []string{"{1,-1,0}"}, func(r *rand.Rand) string { return fmt.Sprintf("{%d,1,%d}", r.Intn(9), r.Intn(9)) }},
		{"c_lseg", "lseg", []string{"[(0,0),(1,1)]"}, func(r *rand.Rand) string { return fmt.Sprintf("[(%d,0),(1,%d)]", r.Intn(9), r.Intn(9)) }},
		{"c_box", "box", []string{"(1,1),(0,0)"}, func(r *rand.Rand) string { return fmt.Sprintf("(%d,%d),(0,0)", 1+r.Intn(9), 1+r.Intn(9)) }},
		{"c_path", "path", []string{"[(0,0),(1,1),(2,0)]", "((0,0),(1,1))"}, func(r *rand.Rand) string { return fmt.Sprintf("[(0,0),(%d,%d)]", r.Intn(9), r.Intn(9)) }},
		{"c_polygon", "polygon", []string{"((0,0),(1,1),(1,0))"}, func(r *rand.Rand) string { return fmt.Sprintf("((0,0),(%d,1),(1,0))", r.Intn(9)) }},
		{"c_circle", "circle", []string{"<(0,0),1.5>"}, func(r *rand.Rand) string { return fmt.Sprintf("<(%d,%d),%d>", r.Intn(9), r.Intn(9), r.Intn(9)) }},
		{"c_cidr", "cidr", []string{"10.0.0.0/8", "::/0"}, func(r *rand.Rand) string { return fmt.Sprintf("%d.0.0.0/8", r.Intn(256)) }},
		{"c_email", "%[1]s_email", []string{"a@b"}, func(r *rand.Rand) string { return fmt.Sprintf("user%d@%s", r.Intn(1000), text(r, 5)) }},
		{"c_amount", "%[1]s_amount", []string{"9999999999.99", "-0.5"}, func(r *rand.Rand) string { return decimalText(r, 10, 2) }},
		{"c_amount2", "%[1]s_amount2", []string{"-1000000000.00", "3"}, func(r *rand.Rand) string { return decimalText(r, 9, 2) }},
		{"c_emails", "%[1]s_email[]", []string{"{}", `{"a@b",NULL}`},
			func(r *rand.Rand) string { return arrayOf([]string{fmt.Sprintf("x%d@y", r.Intn(99))}) }},
		{"c_mood", "%[1]s_mood", []string{`it's "ok"`}, func(r *rand.Rand) string { return []string{"happy", "sad", `it's "ok"`}[r.Intn(3)] }},
		{"c_moods", "%[1]s_mood[]", []string{"{}", `{happy,NULL,"it's \"ok\""}`},
			func(r *rand.Rand) string { return arrayOf([]string{"sad", "happy"}[:1+r.Intn(2)]) }},
	}
}

// TestTypesAsPostgreSQLHasThem is the property test of the type mapping:
// random values of every type the docs map (limits first: extreme
// integers, numerics and floats, NaN and infinities, the ends of
// ClickHouse's Date and DateTime ranges, microseconds, padding, quotes,
// multi-dimensional arrays, domains over domains, an enum label with
// quotes) are inserted into PostgreSQL — half before the reader starts
// (the initial copy), half while it streams, then updated — and every
// value the API returns for them (GET /v1/tables/{table}/rows/{id}) must
// be the column's text from the shard (its output function, TimeZone
// UTC), in the JSON type the docs give it: exactly, except a numeric given
// a Decimal in the config, which is equal as a number. The verifier then
// passes on the same table.
func TestTypesAsPostgreSQLHasThem(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TRIBUTARY_TYPES_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (TRIBUTARY_TYPES_SEED)", seed)
	r := rand.New(rand.NewSource(seed))
	cols := typeColumns()

	var colDDL []string
	for _, c := range cols {
		colDDL = append(colDDL, c.name+" "+c.typ)
	}
	var created string
	t.Cleanup(func() { // after the pipeline's cleanup, which drops the table
		if created == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, loadStack(t).ShardDSNs[0]); err == nil {
			for _, ty := range []string{"mood", "amount2", "amount", "email"} {
				conn.Exec(ctx, "DROP TYPE IF EXISTS "+created+"_"+ty+" CASCADE") //nolint:errcheck
			}
			conn.Close(ctx)
		}
	})
	ddl := append(append([]string{}, typesDDL...),
		"CREATE TABLE %[1]s (id bigint PRIMARY KEY DEFAULT tributary.next_id(), "+strings.Join(colDDL, ", ")+")")
	p := setupPipelineWith(t, []int{0}, nil, true, "types_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000",
		  "column_types":{"c_num_dec":"Decimal(38, 10)"}}]}`, ddl...)
	table := p.table()
	created = table
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })

	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET TimeZone = 'Asia/Kolkata'"); err != nil { // not UTC: offsets must not matter
		t.Fatal(err)
	}
	row := 0
	value := func(c typeColumn) *string {
		var v string
		switch {
		case row < len(c.limits):
			v = c.limits[row]
		case r.Intn(10) == 0:
			return nil
		default:
			v = c.random(r)
		}
		return &v
	}
	names := make([]string, len(cols))
	casts := make([]string, len(cols))
	sets := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
		typ := c.typ
		if strings.Contains(typ, "%") {
			typ = fmt.Sprintf(typ, table)
		}
		casts[i] = fmt.Sprintf("$%d::text::%s", i+1, typ)
		sets[i] = fmt.Sprintf("%s = %s", c.name, casts[i])
	}
	insertSQL := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) RETURNING id", table, strings.Join(names, ", "), strings.Join(casts, ", "))
	updateSQL := fmt.Sprintf("UPDATE %s SET %s WHERE id = $%d", table, strings.Join(sets, ", "), len(cols)+1)
	args := func() []any {
		out := make([]any, len(cols))
		for i, c := range cols {
			out[i] = value(c)
		}
		row++
		return out
	}
	var ids []int64
	insert := func(n int) {
		for range n {
			var id int64
			a := args()
			if err := conn.QueryRow(ctx, insertSQL, a...).Scan(&id); err != nil {
				t.Fatalf("insert row %d %v: %v", row, a, err)
			}
			ids = append(ids, id)
		}
	}
	insert(30) // copied by the initial snapshot
	p.startReader(runCtx, 0)
	p.startLoader(runCtx, "l1")
	insert(30) // streamed
	for _, id := range ids[len(ids)-10:] {
		if _, err := conn.Exec(ctx, updateSQL, append(args(), id)...); err != nil {
			t.Fatalf("update %d: %v", id, err)
		}
	}
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}

	// The source's text of every value, in UTC.
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	// Read as text: each value as its type's output function prints it,
	// which is what the stream carries and psql shows. (A ::text cast is
	// not always that: boolean casts to "true", char(n) loses its padding,
	// inet gains a netmask.)
	source := map[int64][]*string{}
	res := conn.PgConn().ExecParams(ctx, fmt.Sprintf("SELECT id, %s FROM %s", strings.Join(names, ", "), table), nil, nil, nil, nil).Read()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, vals := range res.Rows {
		id, err := strconv.ParseInt(string(vals[0]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		row := make([]*string, len(cols))
		for i, v := range vals[1:] {
			if v != nil {
				s := string(v)
				row[i] = &s
			}
		}
		source[id] = row
	}

	checked, mismatches := 0, 0
	for _, id := range ids {
		got := p.getRowAfter(ctx, table, id, "0:"+lsn)
		for i, c := range cols {
			want := source[id][i]
			if ok, wantJSON := sameAsText(c, want, got[c.name]); !ok {
				mismatches++
				t.Errorf("id %d %s (%s): API %#v, PostgreSQL %s", id, c.name, c.typ, got[c.name], wantJSON)
			}
			checked++
		}
		for k := range got {
			if strings.HasPrefix(k, "_") {
				t.Errorf("id %d: the row shows Tributary's column %s", id, k)
			}
		}
	}
	t.Logf("%d values of %d columns compared with the shard's text, %d differ", checked, len(cols), mismatches)

	// The verifier compares the same values its own way (exactly, per the
	// type of each column, domains as their base type) and agrees.
	if rep := p.runVerify(ctx); !rep.Passed {
		t.Errorf("verify: %+v", rep.Differences)
	}
}

// sameAsText reports whether the API's value (JSON decoded with UseNumber)
// is the PostgreSQL text src (nil: NULL) in the JSON type the API's
// contract gives column c, and what it expected.
func sameAsText(c typeColumn, src *string, api any) (bool, string) {
	if src == nil {
		return api == nil, "NULL"
	}
	s := *src
	switch c.typ {
	case "smallint", "integer":
		return api == json.Number(s), "number " + s
	case "real", "double precision":
		if s == "NaN" || s == "Infinity" || s == "-Infinity" {
			return api == s, "string " + s
		}
		return api == json.Number(s), "number " + s
	case "boolean":
		return api == (s == "t"), "boolean " + s // boolout
	case "timestamp", "timestamptz", "timestamptz(3)":
		// RFC 3339 in UTC with PostgreSQL's fractional digits.
		w := strings.Replace(strings.TrimSuffix(s, "+00"), " ", "T", 1) + "Z"
		return api == w, strconv.Quote(w) + " (" + s + ")"
	}
	if c.name == "c_num_dec" { // a Decimal chosen in the config: the value, not its scale
		a, ok := api.(string)
		if !ok {
			return false, s
		}
		x, err1 := decimal.NewFromString(a)
		y, err2 := decimal.NewFromString(s)
		return err1 == nil && err2 == nil && x.Equal(y), s
	}
	return api == s, strconv.Quote(s)
}

// getRowAfter reads GET /v1/tables/{table}/rows/{id} once the shard has
// applied position after (read-your-writes) and returns the single copy's
// row, numbers as json.Number.
func (p *pipeline) getRowAfter(ctx context.Context, table string, id int64, after string) map[string]any {
	p.t.Helper()
	url := fmt.Sprintf("%s/v1/tables/%s/rows/%d?after=%s&wait=30s", p.api.URL, table, id, after)
	for attempt := 0; ; attempt++ {
		if err := p.failed(); err != nil {
			p.t.Fatalf("components failed: %v", err)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.t.Fatalf("GET %s: %v", url, err)
		}
		var a struct {
			Copies []struct {
				Row map[string]any `json:"row"`
			} `json:"copies"`
		}
		dec := json.NewDecoder(resp.Body)
		dec.UseNumber()
		err = dec.Decode(&a)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil && len(a.Copies) == 1 {
			return a.Copies[0].Row
		}
		if attempt > 20 {
			p.t.Fatalf("GET %s: status %d, %d copies, %v", url, resp.StatusCode, len(a.Copies), err)
		}
		time.Sleep(time.Second)
	}
}

// TestTypesPropertyCoversDocs: every PostgreSQL type schema/clickhouse.md
// lists has a column in TestTypesAsPostgreSQLHasThem.
func TestTypesPropertyCoversDocs(t *testing.T) {
	b, err := os.ReadFile("../schema/clickhouse.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(b), "## PostgreSQL → ClickHouse types")
	have := map[string]bool{}
	for _, c := range typeColumns() {
		have[c.typ] = true
	}
	// The docs' names for what the test declares otherwise.
	as := map[string]string{
		"numeric(p,s), 1 ≤ p ≤ 38, 0 ≤ s ≤ p": "numeric(14,2)", "varchar(n)": "varchar(20)", "char(n)": "char(5)",
		"numeric (no declared precision), numeric(p,s) with p > 38 or s < 0": "numeric",
		"bit(n)": "bit(3)", "bit varying(n)": "bit varying(5)", "enum": "%[1]s_mood", "domain": "%[1]s_amount2",
		"any array": "text[]", "anything else": "", // TestTypesRefusedLoudly
		"citext": "", // an extension the test shards do not have; stored like text
	}
	n := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "PostgreSQL" {
			continue
		}
		cell := strings.TrimSpace(cells[1])
		names := strings.Split(cell, ", ")
		if _, whole := as[cell]; whole {
			names = []string{cell}
		}
		for _, name := range names {
			typ := name
			if v, ok := as[name]; ok {
				typ = v
			}
			if typ != "" && !have[typ] {
				t.Errorf("schema/clickhouse.md lists %s; the property test has no %s column", name, typ)
			}
			n++
		}
	}
	if n < 50 {
		t.Errorf("read %d types from the docs' table, want all of it", n)
	}
}
