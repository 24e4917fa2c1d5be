package chstore

import "github.com/tributary/tributary/internal/envelope"

// CheckType reports whether a column of PostgreSQL type pg (format_type
// text, as in the envelope) can be replicated: nil, or an error wrapping
// ErrUnmappedType that says why. It is the loader's own mapping, so a check
// before the first start agrees with what the loader will do.
func CheckType(pg string) error {
	_, err := mapType(pg)
	return err
}

// CheckColumn is CheckType for a column as the loader sees it: its type
// resolved through domains, whether that is an enum (stored as its label),
// and the ClickHouse type the table config chooses for it (override; ""
// for none). The error names the column and the column_types line that
// would store it.
func CheckColumn(table string, c envelope.Column, override string) error {
	_, err := mapColumn(table, c, override)
	return err
}
