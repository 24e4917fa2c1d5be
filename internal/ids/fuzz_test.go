package ids

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets for every decoder. Seed corpora live in testdata/fuzz/<Name>.
// Properties: decoders never panic; every error wraps a sentinel inside a
// *DecodeError; whatever decodes re-encodes to the same text.

var presetNames = []string{"seed000", "quickcart", "twitter", "instagram"}

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v is not a *DecodeError", err)
	}
	for _, s := range []error{ErrSyntax, ErrRange, ErrShard, ErrVersion, ErrInvalidLayout} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps no sentinel", err)
}

func FuzzSnowflakeDecode(f *testing.F) {
	for _, s := range []string{"734197815705617408", "362387865620483", "0", "-1", "9223372036854775807", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, name := range presetNames {
			s := mustPreset(t, name)
			d, err := s.Decode(in)
			if err != nil {
				checkDecodeErr(t, err)
				continue
			}
			id, err := s.Encode(Parts{UnixMilli: d.Time.UnixMilli(), Node: int64(d.Shard), Seq: d.Sequence})
			if err != nil {
				t.Fatalf("%s: decoded %q to %+v, which does not encode: %v", name, in, d, err)
			}
			if got := strconv.FormatInt(id, 10); got != in {
				t.Fatalf("%s: %q decodes to %+v, which encodes to %s", name, in, d, got)
			}
		}
	})
}

func FuzzSnowflakeRoundTrip(f *testing.F) {
	f.Add(uint8(0), int64(1791590400000), int64(17), int64(0))
	f.Add(uint8(1), int64(1767312000100), int64(5), int64(0))
	f.Add(uint8(2), int64(1288834975657), int64(34), int64(3))
	f.Add(uint8(3), int64(1314220021722), int64(1341), int64(905))
	f.Fuzz(func(t *testing.T, preset uint8, ms, node, seq int64) {
		s := mustPreset(t, presetNames[int(preset)%len(presetNames)])
		id, err := s.Encode(Parts{UnixMilli: ms, Node: node, Seq: seq})
		if err != nil {
			if !errors.Is(err, ErrRange) && !errors.Is(err, ErrShard) {
				t.Fatalf("Encode error %v wraps neither ErrRange nor ErrShard", err)
			}
			return
		}
		d, err := s.Decode(strconv.FormatInt(id, 10))
		if err != nil {
			t.Fatalf("Decode(Encode(%d, %d, %d) = %d): %v", ms, node, seq, id, err)
		}
		if d.Time.UnixMilli() != ms || int64(d.Shard) != node || d.Sequence != seq {
			t.Fatalf("round trip of (%d, %d, %d) gave %+v", ms, node, seq, d)
		}
	})
}

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "-0", "007", "+5", "-9223372036854775808", "9223372036854775808", " 1", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseDecimal(in, true)
		ref, refErr := strconv.ParseInt(in, 10, 64)
		canonical := refErr == nil && strconv.FormatInt(ref, 10) == in
		switch {
		case err == nil && (!canonical || got != ref):
			t.Fatalf("parseDecimal(%q) = %d; strconv says %d, %v", in, got, ref, refErr)
		case err != nil && canonical:
			t.Fatalf("parseDecimal(%q) refused canonical %d: %v", in, ref, err)
		case err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange):
			t.Fatalf("parseDecimal(%q) error %v wraps no sentinel", in, err)
		}
	})
}

func FuzzUUIDDecode(f *testing.F) {
	for _, s := range []string{
		"017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "919108f7-52d1-4320-9bac-f847db4148a8",
		"00000000-0000-0000-0000-000000000000", "{919108f7-52d1-4320-9bac-f847db4148a8}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, perr := ParseUUID(in)
		if perr == nil && u.String() != strings.ToLower(in) {
			t.Fatalf("ParseUUID(%q) = %s", in, u)
		}
		for _, l := range []Layout{UUIDv7{}, UUIDv4{}, HashUUID{Modulus: 7}} {
			d, err := l.Decode(in)
			if err != nil {
				checkDecodeErr(t, err)
				continue
			}
			if perr != nil {
				t.Fatalf("%s decoded %q that ParseUUID refuses: %v", l.Name(), in, perr)
			}
			switch l.(type) {
			case UUIDv7:
				if u.Version() != 7 || d.Time.UnixMilli() != u.UnixMilli() {
					t.Fatalf("uuidv7 decoded %q (v%d) to %+v", in, u.Version(), d)
				}
			case UUIDv4:
				if u.Version() != 4 {
					t.Fatalf("uuidv4 decoded %q (v%d)", in, u.Version())
				}
			case HashUUID:
				if want, _ := PartitionUUID(u, 7); d.Shard != want {
					t.Fatalf("hash shard %d, want %d", d.Shard, want)
				}
			}
		}
	})
}

func FuzzUUIDv7RoundTrip(f *testing.F) {
	f.Add(int64(1645557742000), []byte("0123456789"))
	f.Add(int64(0), []byte{})
	f.Fuzz(func(t *testing.T, ms int64, rnd []byte) {
		var r [10]byte
		copy(r[:], rnd)
		u, err := NewUUIDv7(ms, r)
		if err != nil {
			if !errors.Is(err, ErrRange) {
				t.Fatalf("NewUUIDv7 error %v is not ErrRange", err)
			}
			return
		}
		d, err := UUIDv7{}.Decode(u.String())
		if err != nil || d.Time.UnixMilli() != ms {
			t.Fatalf("Decode(%s) = %+v, %v; want time %d", u, d, err, ms)
		}
	})
}

func FuzzHashBigintDecode(f *testing.F) {
	f.Add("42", uint16(4))
	f.Add("-9223372036854775808", uint16(32))
	f.Add("2147483648", uint16(3))
	f.Add("", uint16(0))
	f.Fuzz(func(t *testing.T, in string, modulus uint16) {
		l := HashBigint{Modulus: int(modulus)}
		d, err := l.Decode(in)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		v, err := strconv.ParseInt(in, 10, 64)
		if err != nil || strconv.FormatInt(v, 10) != in {
			t.Fatalf("decoded non-canonical %q", in)
		}
		if d.Shard < 0 || d.Shard >= int(modulus) || uint64(d.Shard) != RowHashInt8(v)%uint64(modulus) {
			t.Fatalf("shard %d of %d for %d", d.Shard, modulus, v)
		}
	})
}

func FuzzSerialDecode(f *testing.F) {
	for _, s := range []string{"1284551", "0", "-1", "01", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		d, err := Serial{}.Decode(in)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if d.Global || d.HasShard {
			t.Fatalf("serial %q decoded as global or sharded: %+v", in, d)
		}
		if v, err := strconv.ParseInt(in, 10, 64); err != nil || v < 0 || strconv.FormatInt(v, 10) != in {
			t.Fatalf("serial accepted %q", in)
		}
	})
}

func FuzzLookup(f *testing.F) {
	for _, s := range []string{"seed000", "seed000:32", "pgdog-hash-uuid:4", "pgdog-hash-bigint:", "serial:1", "twitter:1024"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		l, err := Lookup(name)
		if err != nil {
			if !errors.Is(err, ErrUnknownLayout) && !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("Lookup(%q) error %v wraps no sentinel", name, err)
			}
			return
		}
		if l.Name() != name {
			t.Fatalf("Lookup(%q).Name() = %q", name, l.Name())
		}
	})
}
