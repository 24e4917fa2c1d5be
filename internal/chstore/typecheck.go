package chstore

// CheckType reports whether a column of PostgreSQL type pg (format_type
// text, as in the envelope) can be replicated: nil, or an error wrapping
// ErrUnmappedType that says why. It is the loader's own mapping, so a check
// before the first start agrees with what the loader will do.
func CheckType(pg string) error {
	_, err := mapType(pg)
	return err
}
