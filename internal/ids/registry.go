package ids

import (
	"fmt"
	"strconv"
	"strings"
)

// Lookup resolves a layout name from per-table configuration:
//
//	seed000, quickcart, twitter, instagram   Snowflake presets
//	seed000:N (any preset + ":N")            same, refusing node fields >= N
//	uuidv7, uuidv4                           uuids of that version only
//	pgdog-hash-bigint:N, pgdog-hash-uuid:N   PostgreSQL hash partition among N shards
//	serial                                   per-shard sequence, not global
//
// Unknown names are ErrUnknownLayout; bad counts are ErrInvalidLayout.
func Lookup(name string) (Layout, error) {
	base, arg, hasArg := strings.Cut(name, ":")
	var n int
	if hasArg {
		v, err := strconv.Atoi(arg)
		if err != nil || strconv.Itoa(v) != arg {
			return nil, fmt.Errorf("layout %q: count %q is not a decimal integer: %w", name, arg, ErrInvalidLayout)
		}
		if err := checkModulus(v); err != nil {
			return nil, fmt.Errorf("layout %q: %w", name, err)
		}
		n = v
	}
	switch base {
	case "uuidv7", "uuidv4", "serial":
		if hasArg {
			return nil, fmt.Errorf("layout %q takes no count: %w", name, ErrInvalidLayout)
		}
		switch base {
		case "uuidv7":
			return UUIDv7{}, nil
		case "uuidv4":
			return UUIDv4{}, nil
		}
		return Serial{}, nil
	case "pgdog-hash-bigint", "pgdog-hash-uuid":
		if !hasArg {
			return nil, fmt.Errorf("layout %q needs a shard count (%s:N): %w", name, base, ErrInvalidLayout)
		}
		if base == "pgdog-hash-bigint" {
			return HashBigint{Modulus: n}, nil
		}
		return HashUUID{Modulus: n}, nil
	}
	s, err := Preset(base)
	if err != nil {
		return nil, fmt.Errorf("layout %q (known: %s): %w", name, strings.Join(Names(), ", "), ErrUnknownLayout)
	}
	if hasArg {
		if s, err = s.WithNodeCount(int64(n)); err != nil {
			return nil, fmt.Errorf("layout %q: %w", name, err)
		}
	}
	return s, nil
}

// Names lists the layout names Lookup accepts, with N for a count.
func Names() []string {
	return []string{
		"seed000", "quickcart", "twitter", "instagram",
		"uuidv7", "uuidv4",
		"pgdog-hash-bigint:N", "pgdog-hash-uuid:N",
		"serial",
	}
}
