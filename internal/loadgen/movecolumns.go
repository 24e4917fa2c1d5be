package loadgen

import "github.com/tributary/tributary/internal/envelope"

// MoveLogColumns are the demo move log's columns (document_moves,
// schema/postgres/10_demo.sql, written by Saga) as a reader's envelope
// lists them: for tests and benchmarks that write the log straight into
// ClickHouse.
var MoveLogColumns = []envelope.Column{
	{Name: "move_id", Type: "uuid", OID: 2950, Key: true},
	{Name: "document_id", Type: "bigint", OID: 20},
	{Name: "from_workspace", Type: "bigint", OID: 20},
	{Name: "to_workspace", Type: "bigint", OID: 20},
	{Name: "from_shard", Type: "integer", OID: 23},
	{Name: "to_shard", Type: "integer", OID: 23},
	{Name: "state", Type: "text", OID: 25},
	{Name: "started_at", Type: "timestamp with time zone", OID: 1184},
	{Name: "finished_at", Type: "timestamp with time zone", OID: 1184},
}
