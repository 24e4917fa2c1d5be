package sustain

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

func TestSusDerive(t *testing.T) {
	parse := func(text string) benchwork.Scrape {
		out := benchwork.Scrape{}
		out.Parse(strings.NewReader(text))
		return out
	}
	a := parse(`tributary_loader_batch_records_count 10
tributary_loader_batch_records_sum 1000
tributary_loader_stage_seconds_total{stage="poll"} 5
tributary_loader_stage_seconds_total{stage="decode"} 1
tributary_loader_stage_seconds_total{stage="insert"} 2
tributary_loader_stage_seconds_total{stage="detect"} 1
tributary_reader_produce_seconds_sum{shard="0"} 1
tributary_reader_produce_seconds_count{shard="0"} 100
tributary_reader_records_produced_total{shard="0"} 100
`)
	b := parse(`tributary_loader_batch_records_count 30
tributary_loader_batch_records_sum 21000
tributary_loader_stage_seconds_total{stage="poll"} 7
tributary_loader_stage_seconds_total{stage="decode"} 3
tributary_loader_stage_seconds_total{stage="insert"} 8
tributary_loader_stage_seconds_total{stage="detect"} 3
tributary_reader_produce_seconds_sum{shard="0"} 2
tributary_reader_produce_seconds_sum{shard="1"} 1
tributary_reader_produce_seconds_count{shard="0"} 200
tributary_reader_produce_seconds_count{shard="1"} 100
tributary_reader_records_produced_total{shard="0"} 10100
tributary_reader_lag_seconds{shard="0"} 0.5
tributary_reader_lag_seconds{shard="1"} 2.5
`)
	p := derive(a, b, 10*time.Second)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("batches", p.LoaderBatches, 20)
	near("records per batch", p.LoaderRecordsPerBatch, 1000)
	near("insert busy", p.LoaderStageBusy["insert"], 0.6)
	near("insert ms per batch", p.LoaderStageMSPerBatch["insert"], 300)
	near("apply busy (insert + detect, not poll or decode)", p.LoaderApplyBusy, 0.8)
	near("produce ack ms", p.ReaderProduceMS, 10)
	near("reader lag max", p.ReaderLagSecondsMax, 2.5)
	near("records produced per s", p.ReaderRecordsPerS, 1000)
	if got := stageList(p.LoaderStageBusy, "%.1f"); got != "poll 0.2, decode 0.2, insert 0.6, detect 0.2" {
		t.Errorf("stageList = %q", got)
	}
}

func TestSusVerdictGeneratorShort(t *testing.T) {
	st := step{OfferedChanges: 10000, RowsPerOp: 100, OfferedOps: 100, Samples: []sample{
		{T: 0, Staleness: 1},
		{T: 30, Ops: 1000, GenRows: 100000, Changes: 100000, Backlog: 500, Staleness: 1},
		{T: 60, Ops: 2000, GenRows: 200000, Changes: 200000, Backlog: 600, Staleness: 1},
	}}
	verdict(&st)
	if !st.Sustained || !strings.Contains(st.Why, "generator reached only 3333 of 10000 changes/s") {
		t.Fatalf("verdict %v %q", st.Sustained, st.Why)
	}
	near := math.Abs(st.ChangesPerOpAv-100) < 1e-9
	if !near {
		t.Fatalf("changes per op %v, want 100", st.ChangesPerOpAv)
	}
}
