package ids

import (
	"errors"
	"testing"
	"time"
)

func TestParseUUID(t *testing.T) {
	tests := []struct {
		in      string
		want    string // canonical form; "" when refused
		version int
	}{
		{"017F22E2-79B0-7CC3-98C4-DC0C0C07398F", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", 7},
		{"919108f7-52d1-4320-9bac-f847db4148a8", "919108f7-52d1-4320-9bac-f847db4148a8", 4},
		{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000", 0},
		{"919108f752d143209bacf847db4148a8", "", 0},
		{"{919108f7-52d1-4320-9bac-f847db4148a8}", "", 0},
		{"919108f7-52d1-4320-9bac-f847db4148a", "", 0},
		{"919108f7-52d14-320-9bac-f847db4148a8", "", 0},
		{"919108f7-52d1-4320-9bac-f847db4148ag", "", 0},
		{"919108f7-52d1-4320-9bac_f847db4148a8", "", 0},
		{"", "", 0},
	}
	for _, tt := range tests {
		u, err := ParseUUID(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("ParseUUID(%q) = %v, %v; want ErrSyntax", tt.in, u, err)
			}
			continue
		}
		if err != nil || u.String() != tt.want || u.Version() != tt.version {
			t.Errorf("ParseUUID(%q) = %v (v%d), %v; want %s (v%d)", tt.in, u, u.Version(), err, tt.want, tt.version)
		}
	}
}

func TestUUIDDecode(t *testing.T) {
	tests := []struct {
		name    string
		layout  Layout
		id      string
		want    Decoded
		wantErr error
	}{
		// RFC 9562 appendix A.6: unix_ts_ms 0x017F22E279B0 = 1645557742000,
		// Tuesday 2022-02-22 14:22:22 -05:00.
		{"rfc v7", UUIDv7{}, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
			Decoded{Kind: KindUUIDv7, Layout: "uuidv7", Time: utc("2022-02-22T19:22:22Z"), Global: true}, nil},
		{"v7 upper case", UUIDv7{}, "017F22E2-79B0-7CC3-98C4-DC0C0C07398F",
			Decoded{Kind: KindUUIDv7, Layout: "uuidv7", Time: utc("2022-02-22T19:22:22Z"), Global: true}, nil},
		{"rfc v4", UUIDv4{}, "919108f7-52d1-4320-9bac-f847db4148a8",
			Decoded{Kind: KindUUIDv4, Layout: "uuidv4", Global: true}, nil},
		{"v4 where v7 demanded", UUIDv7{}, "919108f7-52d1-4320-9bac-f847db4148a8", Decoded{}, ErrVersion},
		{"v1 where v7 demanded", UUIDv7{}, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", Decoded{}, ErrVersion},
		{"nil uuid", UUIDv7{}, "00000000-0000-0000-0000-000000000000", Decoded{}, ErrVersion},
		{"v7 with NCS variant", UUIDv7{}, "017f22e2-79b0-7cc3-18c4-dc0c0c07398f", Decoded{}, ErrVersion},
		{"v7 where v4 demanded", UUIDv4{}, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", Decoded{}, ErrVersion},
		{"bigint text", UUIDv7{}, "734197815705617408", Decoded{}, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.layout.Decode(tt.id)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Decode(%q) = %+v, %v; want %v", tt.id, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !got.Time.Equal(tt.want.Time) {
				t.Fatalf("Decode(%q) = %+v, %v; want %+v", tt.id, got, err, tt.want)
			}
			got.Time, tt.want.Time = time.Time{}, time.Time{}
			if got != tt.want {
				t.Fatalf("Decode(%q) = %+v, want %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestNewUUIDv7(t *testing.T) {
	rnd := [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	u, err := NewUUIDv7(1645557742000, rnd)
	if err != nil {
		t.Fatal(err)
	}
	// Version nibble 7 and variant 10 overwrite the random bits.
	if got, want := u.String(), "017f22e2-79b0-7fff-bfff-ffffffffffff"; got != want {
		t.Fatalf("NewUUIDv7 = %s, want %s", got, want)
	}
	for _, ms := range []int64{-1, 1 << 48} {
		if _, err := NewUUIDv7(ms, rnd); !errors.Is(err, ErrRange) {
			t.Errorf("NewUUIDv7(%d) err = %v, want ErrRange", ms, err)
		}
	}
}
