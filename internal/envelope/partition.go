package envelope

// PartitionScope narrows a truncate to the rows of one partition of a
// partitioned table: the partition was truncated, detached or dropped, which
// PostgreSQL does not publish through the partitioned table (see
// schema/postgres/20_partitions.sql and schema/envelope.md). A row of the
// table was in the partition if it satisfies every level's bound.
type PartitionScope struct {
	// Cause is "truncate", "detach" or "drop".
	Cause string `json:"cause"`
	// Partition is the partition's schema-qualified name at the source.
	Partition string `json:"partition"`
	// Levels are the partition's bound and those of its partitioned
	// ancestors below the table, the table's own partitioning first.
	Levels []PartitionBound `json:"levels"`
}

// PartitionBound is one level of partitioning.
type PartitionBound struct {
	// Strategy is PostgreSQL's partstrat: "r" (range), "l" (list), "h" (hash).
	Strategy string `json:"strategy"`
	// Columns are the partition key's columns, in key order.
	Columns []string `json:"columns"`
	// Bound is pg_get_expr(relpartbound) printed with DateStyle ISO and
	// TimeZone UTC: "FOR VALUES FROM (...) TO (...)", "FOR VALUES IN (...)",
	// "FOR VALUES WITH (modulus m, remainder r)" or "DEFAULT".
	Bound string `json:"bound"`
	// Siblings, for a DEFAULT partition, are the bounds of the other
	// partitions of its parent: the default holds the rows none of them do.
	Siblings []string `json:"siblings,omitempty"`
	// Types are the key columns' types, as the table's columns name them
	// (Column.Type: domains resolved), one per column; set by the reader,
	// so that the bound can be matched before the consumer has seen a
	// change of the table (a partition key column's type cannot change).
	// Absent from envelopes of older readers.
	Types []string `json:"types,omitempty"`
}
