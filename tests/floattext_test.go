package tests

import (
	"context"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/query"
)

// TestFloatTextMatchesPostgreSQL: the API prints real and double precision
// values with exactly the digits PostgreSQL's float4out and float8out
// print (query.PGFloatText), for random bit patterns, random magnitudes and
// decimals with few digits: the shortest text that reads back, with
// PostgreSQL's rule for a decimal halfway between two floats, in fixed or
// exponent form by PostgreSQL's thresholds.
func TestFloatTextMatchesPostgreSQL(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	for _, c := range []struct {
		typ  string
		bits int
	}{{"real", 32}, {"double precision", 64}} {
		var in []string
		var vals []float64
		for i := 0; i < 50000; i++ {
			var f float64
			switch i % 3 {
			case 0:
				if c.bits == 32 {
					f = float64(math.Float32frombits(r.Uint32()))
				} else {
					f = math.Float64frombits(r.Uint64())
				}
			case 1:
				f = r.NormFloat64() * math.Pow(10, float64(r.Intn(40)-20))
			case 2:
				f = float64(r.Int63n(1e17)) / math.Pow(10, float64(r.Intn(20)))
			}
			if c.bits == 32 {
				f = float64(float32(f))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			vals = append(vals, f)
			in = append(in, strconv.FormatFloat(f, 'g', -1, c.bits))
		}
		res := conn.PgConn().ExecParams(ctx, "SELECT x::"+c.typ+" FROM unnest($1::text[]) x",
			[][]byte{[]byte("{" + strings.Join(in, ",") + "}")}, nil, nil, nil).Read()
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		bad := 0
		for i, row := range res.Rows {
			if got, want := query.PGFloatText(vals[i], c.bits), string(row[0]); got != want {
				if bad++; bad <= 10 {
					t.Errorf("%s %v: PGFloatText %s, PostgreSQL %s", c.typ, vals[i], got, want)
				}
			}
		}
		t.Logf("%s: %d values, %d differ", c.typ, len(res.Rows), bad)
	}
}
