package verify

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Kind is the kind of a difference.
type Kind string

const (
	// KindMissing: the id is live on a shard and the API has no copy for it.
	KindMissing Kind = "missing"
	// KindExtra: the API has a copy for a shard where the id is not live.
	KindExtra Kind = "extra"
	// KindWrongShard: both at once for one id — a copy is there, but
	// attributed to a shard the id does not live on.
	KindWrongShard Kind = "wrong_shard"
	// KindWrongValue: a column of a copy differs from the source row.
	KindWrongValue Kind = "wrong_value"
	// KindCountMismatch: a shard's live row count differs between the
	// source and ClickHouse.
	KindCountMismatch Kind = "count_mismatch"
	// KindLagging: the API's watermark of a shard did not reach the shard's
	// WAL position within the wait, so differences may be staleness.
	KindLagging Kind = "lagging"
	// KindMoveShown: a document mid-move is not shown once by
	// GET /v1/documents/{id} (moves_compare.go).
	KindMoveShown Kind = "move_shown"
	// KindMoveAnomaly: a stuck or lost move that exists is not listed by
	// GET /v1/anomalies/moves, or one is listed that does not exist.
	KindMoveAnomaly Kind = "move_anomaly"
)

// Difference is one thing the API (or ClickHouse) has wrong.
type Difference struct {
	Kind  Kind   `json:"kind"`
	Table string `json:"table,omitempty"`
	ID    string `json:"id,omitempty"`
	Shard int    `json:"shard"`
	// Column is set for KindWrongValue.
	Column string `json:"column,omitempty"`
	// Source and API are the two sides as text: the PostgreSQL text and
	// the API's JSON (NULL / null for nulls), long values cut around the
	// first differing byte; counts for KindCountMismatch, LSNs for
	// KindLagging, shard lists for KindWrongShard.
	Source string `json:"source,omitempty"`
	API    string `json:"api,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Mismatches counts differences by kind.
type Mismatches struct {
	Missing       int `json:"missing"`
	Extra         int `json:"extra"`
	WrongShard    int `json:"wrong_shard"`
	WrongValue    int `json:"wrong_value"`
	CountMismatch int `json:"count_mismatch"`
	Lagging       int `json:"lagging"`
	MoveShown     int `json:"move_shown"`
	MoveAnomaly   int `json:"move_anomaly"`
	Revenue       int `json:"revenue"`
}

func (m *Mismatches) add(k Kind) {
	switch k {
	case KindMissing:
		m.Missing++
	case KindExtra:
		m.Extra++
	case KindWrongShard:
		m.WrongShard++
	case KindWrongValue:
		m.WrongValue++
	case KindCountMismatch:
		m.CountMismatch++
	case KindLagging:
		m.Lagging++
	case KindMoveShown:
		m.MoveShown++
	case KindMoveAnomaly:
		m.MoveAnomaly++
	case KindRevenue:
		m.Revenue++
	}
}

// Total is the number of differences of every kind.
func (m Mismatches) Total() int {
	return m.Missing + m.Extra + m.WrongShard + m.WrongValue + m.CountMismatch + m.Lagging + m.MoveShown + m.MoveAnomaly + m.Revenue
}

// MovesReport is what was checked of the move log (table config `moves`).
type MovesReport struct {
	Table string `json:"table"`
	// Moves is the number of moves in the logs; InProgress of documents
	// whose newest move is under way, each looked up by id.
	Moves      int `json:"moves"`
	InProgress int `json:"in_progress"`
	// Stuck and Lost are the anomalies that exist at the source (as of
	// the grace period); ArrivedThenDeleted are documents on no shard that
	// reached their target and were deleted there later (not lost).
	Stuck              int `json:"stuck"`
	Lost               int `json:"lost"`
	ArrivedThenDeleted int `json:"arrived_then_deleted"`
}

// ShardReport is what was checked of one table on one shard.
type ShardReport struct {
	Shard int `json:"shard"`
	// SourceRows and ClickHouseRows are live row counts.
	SourceRows     int64 `json:"source_rows"`
	ClickHouseRows int64 `json:"clickhouse_rows"`
	// Checked is the number of the shard's rows compared; ViaAPI of them
	// through the API one by one, the others with ClickHouse's rows read
	// in bulk (Config.APISample).
	Checked int `json:"checked"`
	ViaAPI  int `json:"via_api"`
	// Sampled is set when Checked is a random sample of SourceRows.
	Sampled bool `json:"sampled"`
}

// TableReport is what was checked of one table.
type TableReport struct {
	Table  string        `json:"table"`
	Shards []ShardReport `json:"shards"`
}

// Position is one shard's source WAL position and how far the API got.
type Position struct {
	Shard     int    `json:"shard"`
	SourceLSN string `json:"source_lsn"`
	// APILSN is the shard's watermark in GET /v1/shards ("" if absent).
	APILSN   string `json:"api_lsn"`
	Complete bool   `json:"complete"`
	// Reached: Complete and APILSN >= SourceLSN.
	Reached bool `json:"reached"`
}

// Report is the outcome of a run.
type Report struct {
	Passed      bool          `json:"passed"`
	Started     time.Time     `json:"started"`
	TookSeconds float64       `json:"took_seconds"`
	API         string        `json:"api"`
	Positions   []Position    `json:"positions"`
	Tables      []TableReport `json:"tables"`
	// Moves is set when a move log is configured.
	Moves *MovesReport `json:"moves,omitempty"`
	// Revenue is set when revenue is configured.
	Revenue *RevenueReport `json:"revenue,omitempty"`
	// Mismatches counts every difference found (after the re-check).
	Mismatches Mismatches `json:"mismatches"`
	// Rechecked is how many ids and counts were checked a second time.
	Rechecked int `json:"rechecked"`
	// Differences are the first Config.MaxDifferences in detail.
	Differences []Difference `json:"differences"`
}

// Checked is the number of rows compared, over all tables and shards.
func (r *Report) Checked() int { return r.sumShards(func(s ShardReport) int { return s.Checked }) }

// CheckedViaAPI is the number of rows compared through the API, over all
// tables and shards.
func (r *Report) CheckedViaAPI() int { return r.sumShards(func(s ShardReport) int { return s.ViaAPI }) }

// sumShards sums f over every table's shards.
func (r *Report) sumShards(f func(ShardReport) int) int {
	n := 0
	for _, t := range r.Tables {
		for _, s := range t.Shards {
			n += f(s)
		}
	}
	return n
}

// WriteText writes the human summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "verify: %s — %d difference(s); %d table(s), %d row(s) checked (%d through %s, the others read from ClickHouse as the API reads them) in %.1fs\n",
		verdict, r.Mismatches.Total(), len(r.Tables), r.Checked(), r.CheckedViaAPI(), r.API, r.TookSeconds)

	b.WriteString("\npositions (source pg_current_wal_lsn, API watermark):\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  shard\tsource\tapi\tstate")
	for _, p := range r.Positions {
		state := "reached"
		switch {
		case p.APILSN == "":
			state = "absent from the API"
		case !p.Complete:
			state = "incomplete"
		case !p.Reached:
			state = "behind"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", p.Shard, p.SourceLSN, orDash(p.APILSN), state)
	}
	tw.Flush()

	for _, t := range r.Tables {
		fmt.Fprintf(&b, "\ntable %s:\n", t.Table)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  shard\tsource rows\tclickhouse rows\tchecked\tof them via the API")
		for _, s := range t.Shards {
			checked := strconv.Itoa(s.Checked)
			if s.Sampled {
				checked += " (sample)"
			}
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%s\t%d\n", s.Shard, s.SourceRows, s.ClickHouseRows, checked, s.ViaAPI)
		}
		tw.Flush()
	}

	if mv := r.Moves; mv != nil {
		fmt.Fprintf(&b, "\nmoves of %s: %d logged, %d in progress (each looked up by id), %d stuck, %d lost, %d arrived then deleted\n",
			mv.Table, mv.Moves, mv.InProgress, mv.Stuck, mv.Lost, mv.ArrivedThenDeleted)
	}
	if rv := r.Revenue; rv != nil {
		fmt.Fprintf(&b, "\nrevenue %s..%s: %d groups (by month, shard and workspace, each with currency) compared with the shards' sums, answered from %s\n",
			rv.From.Format(time.DateOnly), rv.To.Format(time.DateOnly), rv.Groups, strings.Join(rv.Sources, " and "))
	}
	m := r.Mismatches
	fmt.Fprintf(&b, "\nmismatches: missing %d, extra %d, wrong shard %d, wrong value %d, count mismatch %d, lagging %d, move shown %d, move anomaly %d, revenue %d (re-checked %d)\n",
		m.Missing, m.Extra, m.WrongShard, m.WrongValue, m.CountMismatch, m.Lagging, m.MoveShown, m.MoveAnomaly, m.Revenue, r.Rechecked)
	if len(r.Differences) > 0 {
		fmt.Fprintf(&b, "\nfirst %d of %d difference(s):\n", len(r.Differences), m.Total())
		for _, d := range r.Differences {
			b.WriteString("  " + d.String() + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String is a one-line description of the difference.
func (d Difference) String() string {
	var b strings.Builder
	b.WriteString(string(d.Kind))
	if d.Table != "" {
		b.WriteString(" table " + d.Table)
	}
	if d.ID != "" {
		b.WriteString(" id " + d.ID)
	}
	b.WriteString(" shard " + strconv.Itoa(d.Shard))
	if d.Column != "" {
		b.WriteString(" column " + d.Column)
	}
	if d.Source != "" || d.API != "" {
		fmt.Fprintf(&b, ": source %s, api %s", orDash(d.Source), orDash(d.API))
	}
	if d.Detail != "" {
		b.WriteString(" (" + d.Detail + ")")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
