package ids

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func mustPreset(t testing.TB, name string) Snowflake {
	t.Helper()
	s, err := Preset(name)
	if err != nil {
		t.Fatalf("Preset(%q): %v", name, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestSnowflakeEncode(t *testing.T) {
	tests := []struct {
		name   string
		layout string
		parts  Parts
		want   int64
	}{
		// The demo generator (schema/postgres/01_snowflake.sql):
		// make_id(1791590400000, 17, 0). Time field
		// 1791590400000 - 1704067200000 = 87523200000 ms;
		// 87523200000 << 23 = 87523200000 * 8388608 = 734197815705600000;
		// 17 << 10 = 17408; sum 734197815705617408 (what make_id returns).
		{"seed000 a", "seed000", Parts{1791590400000, 17, 0}, 734197815705617408},
		// make_id(now, 4, 0): 734197815705600000 + 4<<10 (4096).
		{"seed000 b", "seed000", Parts{1791590400000, 4, 0}, 734197815705604096},
		// make_id(now+1, 4, 0): b + 1<<23 (8388608); b < c (time order).
		{"seed000 c", "seed000", Parts{1791590400001, 4, 0}, 734197815713992704},
		// QuickCart's worked example, its second id: 100 ms after 362387865620483
		// (time field 86400000) from worker 5 with sequence 0:
		// 86400100 << 22 = 86400100 * 4194304 = 362388285030400;
		// 5 << 12 = 20480; sum 362388285050880.
		{"quickcart example", "quickcart", Parts{1767225600000 + 86400100, 5, 0}, 362388285050880},
		// Twitter: 1000 ms after its epoch, datacenter 1, worker 2 (node
		// 1<<5|2 = 34), sequence 3: 1000<<22 = 4194304000; 34<<12 = 139264;
		// + 3 = 4194443267.
		{"twitter", "twitter", Parts{1288834974657 + 1000, 34, 3}, 4194443267},
		// Instagram blog: shard 1341 (user 31341 % 2000), sequence
		// 5001 % 1024 = 905, 1 ms after the epoch:
		// 1<<23 = 8388608; 1341<<10 = 1373184; + 905 = 9762697.
		{"instagram", "instagram", Parts{1314220021721 + 1, 1341, 905}, 9762697},
		{"epoch zero", "seed000", Parts{1704067200000, 0, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustPreset(t, tt.layout)
			got, err := s.Encode(tt.parts)
			if err != nil || got != tt.want {
				t.Fatalf("Encode(%+v) = %d, %v; want %d", tt.parts, got, err, tt.want)
			}
			back, err := s.Split(got)
			if err != nil || back != tt.parts {
				t.Fatalf("Split(%d) = %+v, %v; want %+v", got, back, err, tt.parts)
			}
		})
	}
}

func TestSnowflakeDecode(t *testing.T) {
	tests := []struct {
		name   string
		layout string
		id     string
		want   Decoded
	}{
		{"seed000 a", "seed000", "734197815705617408", Decoded{
			Kind: KindSnowflake, Layout: "seed000", Time: utc("2026-10-10T00:00:00Z"),
			Shard: 17, HasShard: true, Global: true,
		}},
		{"seed000 b", "seed000", "734197815705604096", Decoded{
			Kind: KindSnowflake, Layout: "seed000", Time: utc("2026-10-10T00:00:00Z"),
			Shard: 4, HasShard: true, Global: true,
		}},
		// QuickCart's worked example: 362387865620483 >> 22 = 86400000 (since
		// 86400000 * 4194304 = 362387865600000, remainder 20483);
		// 20483 = 5*4096 + 3, so worker 5, sequence 3; 86400000 ms is one day
		// after 2026-01-01.
		{"quickcart example", "quickcart", "362387865620483", Decoded{
			Kind: KindSnowflake, Layout: "quickcart", Time: utc("2026-01-02T00:00:00Z"),
			Shard: 5, HasShard: true, Sequence: 3, Global: true,
		}},
		{"quickcart 100 ms later", "quickcart", "362388285050880", Decoded{
			Kind: KindSnowflake, Layout: "quickcart", Time: utc("2026-01-02T00:00:00.1Z"),
			Shard: 5, HasShard: true, Global: true,
		}},
		{"twitter split", "twitter", "4194443267", Decoded{
			Kind: KindSnowflake, Layout: "twitter", Time: utc("2010-11-04T01:42:55.657Z"),
			Shard: 34, HasShard: true, Datacenter: 1, Worker: 2, Sequence: 3, Global: true,
		}},
		// A published Instagram media id with its known creation time
		// (2020-08-26T13:43:27Z): 2384288897814875714 >> 23 = 170059405592,
		// + 1314220021721 = 1598449427313 ms = 13:43:27.313Z; the shard field
		// (id >> 10) & 8191 = 2675, the sequence id & 1023 = 578.
		{"instagram media id", "instagram", "2384288897814875714", Decoded{
			Kind: KindSnowflake, Layout: "instagram", Time: utc("2020-08-26T13:43:27.313Z"),
			Shard: 2675, HasShard: true, Sequence: 578, Global: true,
		}},
		{"seed000 with shard count", "seed000:32", "734197815705617408", Decoded{
			Kind: KindSnowflake, Layout: "seed000:32", Time: utc("2026-10-10T00:00:00Z"),
			Shard: 17, HasShard: true, Global: true,
		}},
		{"largest seed000", "seed000", "9223372036854775807", Decoded{
			Kind: KindSnowflake, Layout: "seed000", Time: utc("2058-11-03T19:53:47.775Z"),
			Shard: 8191, HasShard: true, Sequence: 1023, Global: true,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Lookup(tt.layout)
			if err != nil {
				t.Fatalf("Lookup(%q): %v", tt.layout, err)
			}
			got, err := l.Decode(tt.id)
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.id, err)
			}
			if !got.Time.Equal(tt.want.Time) {
				t.Errorf("Time = %v, want %v", got.Time, tt.want.Time)
			}
			got.Time, tt.want.Time = time.Time{}, time.Time{}
			if got != tt.want {
				t.Errorf("Decode(%q) = %+v, want %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestSnowflakeDecodeRefuses(t *testing.T) {
	narrow, err := NewSnowflake(SnowflakeConfig{Name: "narrow", EpochMS: 0, TimeBits: 30, NodeBits: 4, SeqBits: 4})
	if err != nil {
		t.Fatal(err)
	}
	seed000 := mustPreset(t, "seed000")
	four, err := seed000.WithNodeCount(4)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		layout Layout
		id     string
		want   error
	}{
		{"empty", seed000, "", ErrSyntax},
		{"letters", seed000, "abc", ErrSyntax},
		{"trailing letter", seed000, "123x", ErrSyntax},
		{"leading zero", seed000, "0123", ErrSyntax},
		{"plus sign", seed000, "+1", ErrSyntax},
		{"space", seed000, " 1", ErrSyntax},
		{"exponent", seed000, "1e5", ErrSyntax},
		{"decimal point", seed000, "1.0", ErrSyntax},
		{"negative zero", seed000, "-0", ErrSyntax},
		{"lone minus", seed000, "-", ErrSyntax},
		{"21 digits", seed000, "123456789012345678901", ErrSyntax},
		{"negative", seed000, "-734197815705617408", ErrRange},
		{"beyond bigint", seed000, "9223372036854775808", ErrRange},
		{"20 digits", seed000, "99999999999999999999", ErrRange},
		{"time beyond 30 bits", narrow, strconv.FormatInt(int64(1)<<38, 10), ErrRange},
		{"shard 17 of 4", four, "734197815705617408", ErrShard},
		{"uuid text", seed000, "0190b6f5-6a1c-7c3e-9f00-123456789abc", ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.layout.Decode(tt.id)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode(%q) = %+v, %v; want %v", tt.id, got, err, tt.want)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Input != tt.id || de.Layout != tt.layout.Name() {
				t.Fatalf("error %v is not a *DecodeError for %q", err, tt.id)
			}
		})
	}
}

func TestSnowflakeEncodeRefuses(t *testing.T) {
	s := mustPreset(t, "seed000")
	tests := []struct {
		name  string
		parts Parts
		want  error
	}{
		{"before epoch", Parts{1704067199999, 0, 0}, ErrRange},
		{"after range", Parts{1704067200000 + 1<<40, 0, 0}, ErrRange},
		{"node too big", Parts{1704067200000, 8192, 0}, ErrShard},
		{"negative node", Parts{1704067200000, -1, 0}, ErrShard},
		{"seq too big", Parts{1704067200000, 0, 1024}, ErrRange},
		{"negative seq", Parts{1704067200000, 0, -1}, ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if id, err := s.Encode(tt.parts); !errors.Is(err, tt.want) {
				t.Fatalf("Encode(%+v) = %d, %v; want %v", tt.parts, id, err, tt.want)
			}
		})
	}
}

func TestNewSnowflakeValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  SnowflakeConfig
	}{
		{"no name", SnowflakeConfig{TimeBits: 41, NodeBits: 10, SeqBits: 12}},
		{"no time bits", SnowflakeConfig{Name: "x", NodeBits: 10, SeqBits: 12}},
		{"64 bits", SnowflakeConfig{Name: "x", TimeBits: 41, NodeBits: 13, SeqBits: 10}},
		{"wrapping sum", SnowflakeConfig{Name: "x", TimeBits: 1, NodeBits: ^uint(0), SeqBits: 2}},
		{"datacenter wider than node", SnowflakeConfig{Name: "x", TimeBits: 41, NodeBits: 4, SeqBits: 12, DatacenterBits: 5}},
		{"negative epoch", SnowflakeConfig{Name: "x", EpochMS: -1, TimeBits: 41, NodeBits: 10, SeqBits: 12}},
		{"node count too big", SnowflakeConfig{Name: "x", TimeBits: 41, NodeBits: 10, SeqBits: 12, NodeCount: 1025}},
		{"negative node count", SnowflakeConfig{Name: "x", TimeBits: 41, NodeBits: 10, SeqBits: 12, NodeCount: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSnowflake(tt.cfg); !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("NewSnowflake(%+v) err = %v, want ErrInvalidLayout", tt.cfg, err)
			}
		})
	}
}

func TestPresetRanges(t *testing.T) {
	tests := []struct {
		name    string
		maxTime string
	}{
		// 2^40 - 1 ms after 2024-01-01: the last time a positive bigint holds.
		{"seed000", "2058-11-03T19:53:47.775Z"},
		// 2^41 - 1 ms after 2026-01-01 (about 69.7 years).
		{"quickcart", "2095-09-07T15:47:35.551Z"},
		{"twitter", "2080-07-10T17:30:30.208Z"},
		// 2^40 - 1 ms after 2011-08-24T21:07:01.721Z.
		{"instagram", "2046-06-27T17:00:49.496Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustPreset(t, tt.name)
			want := utc(tt.maxTime)
			if got := s.MaxTime(); !got.Equal(want) {
				t.Errorf("MaxTime() = %v, want %v", got, want)
			}
		})
	}
}
