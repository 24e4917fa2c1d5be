package ids

import (
	"errors"
	"testing"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name     string
		wantName string
		wantErr  error
	}{
		{"seed000", "seed000", nil},
		{"quickcart", "quickcart", nil},
		{"twitter", "twitter", nil},
		{"instagram", "instagram", nil},
		{"seed000:32", "seed000:32", nil},
		{"uuidv7", "uuidv7", nil},
		{"uuidv4", "uuidv4", nil},
		{"serial", "serial", nil},
		{"pgdog-hash-bigint:4", "pgdog-hash-bigint:4", nil},
		{"pgdog-hash-uuid:32", "pgdog-hash-uuid:32", nil},
		{"pgdog-hash-bigint", "", ErrInvalidLayout},
		{"pgdog-hash-bigint:0", "", ErrInvalidLayout},
		{"pgdog-hash-bigint:-2", "", ErrInvalidLayout},
		{"pgdog-hash-bigint:04", "", ErrInvalidLayout},
		{"pgdog-hash-uuid:x", "", ErrInvalidLayout},
		{"uuidv7:3", "", ErrInvalidLayout},
		{"serial:3", "", ErrInvalidLayout},
		{"quickcart:2000", "", ErrInvalidLayout}, // 10 worker bits hold 1024
		{"snowflake", "", ErrUnknownLayout},
		{"", "", ErrUnknownLayout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Lookup(tt.name)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Lookup(%q) = %v, %v; want %v", tt.name, l, err, tt.wantErr)
				}
				return
			}
			if err != nil || l.Name() != tt.wantName {
				t.Fatalf("Lookup(%q) = %v, %v; want name %q", tt.name, l, err, tt.wantName)
			}
		})
	}
}

func TestHashLayouts(t *testing.T) {
	// Expected shards from satisfies_hash_partition (see pghash_test.go).
	tests := []struct {
		layout string
		id     string
		want   Decoded
	}{
		{"pgdog-hash-bigint:4", "42", Decoded{Kind: KindHashBigint, Layout: "pgdog-hash-bigint:4", Shard: 2, HasShard: true, Global: true}},
		{"pgdog-hash-bigint:4", "-1", Decoded{Kind: KindHashBigint, Layout: "pgdog-hash-bigint:4", Shard: 1, HasShard: true, Global: true}},
		{"pgdog-hash-uuid:1000", "f47ac10b-58cc-4372-a567-0e02b2c3d479", Decoded{Kind: KindHashUUID, Layout: "pgdog-hash-uuid:1000", Shard: 370, HasShard: true, Global: true}},
		{"serial", "1284551", Decoded{Kind: KindSerial, Layout: "serial"}},
	}
	for _, tt := range tests {
		l, err := Lookup(tt.layout)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Decode(tt.id)
		if err != nil || got != tt.want {
			t.Errorf("%s.Decode(%q) = %+v, %v; want %+v", tt.layout, tt.id, got, err, tt.want)
		}
	}
}

func TestHashLayoutsRefuse(t *testing.T) {
	tests := []struct {
		layout Layout
		id     string
		want   error
	}{
		{HashBigint{Modulus: 4}, "", ErrSyntax},
		{HashBigint{Modulus: 4}, "042", ErrSyntax},
		{HashBigint{Modulus: 4}, "9223372036854775808", ErrRange},
		{HashBigint{Modulus: 4}, "-9223372036854775809", ErrRange},
		{HashBigint{Modulus: 0}, "42", ErrInvalidLayout},
		{HashUUID{Modulus: 4}, "42", ErrSyntax},
		{HashUUID{}, "f47ac10b-58cc-4372-a567-0e02b2c3d479", ErrInvalidLayout},
		{Serial{}, "-5", ErrRange},
		{Serial{}, "five", ErrSyntax},
	}
	for _, tt := range tests {
		if got, err := tt.layout.Decode(tt.id); !errors.Is(err, tt.want) {
			t.Errorf("%s.Decode(%q) = %+v, %v; want %v", tt.layout.Name(), tt.id, got, err, tt.want)
		}
	}
}

func TestParseDecimalBounds(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"9223372036854775807", 9223372036854775807},
		{"-9223372036854775808", -9223372036854775808},
		{"-1", -1},
	}
	for _, tt := range tests {
		if got, err := parseDecimal(tt.in, true); err != nil || got != tt.want {
			t.Errorf("parseDecimal(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}
