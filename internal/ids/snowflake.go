package ids

import (
	"fmt"
	"strconv"
	"time"
)

// SnowflakeConfig describes a Snowflake layout. From the most significant
// bit: zero bits (ids are non-negative bigints), TimeBits of milliseconds
// since EpochMS, NodeBits of shard/worker, SeqBits of per-millisecond
// sequence. TimeBits+NodeBits+SeqBits must not exceed 63: the sign bit of a
// bigint is never part of the time.
type SnowflakeConfig struct {
	Name     string
	EpochMS  int64 // Unix milliseconds of time field 0
	TimeBits uint
	NodeBits uint
	SeqBits  uint
	// DatacenterBits, when non-zero, splits the node field into a datacenter
	// (its high DatacenterBits) and a worker (the rest), as Twitter does.
	DatacenterBits uint
	// NodeCount, when non-zero, is the number of shards/workers in use; a
	// node field >= NodeCount is refused with ErrShard. Zero means any value
	// the field can hold is valid.
	NodeCount int64
}

// Snowflake is a validated Snowflake layout. It is an immutable value, safe
// for concurrent use; build it with NewSnowflake or Lookup.
type Snowflake struct {
	cfg     SnowflakeConfig
	maxTime int64 // largest time field value, 2^TimeBits - 1
	maxNode int64 // largest node field value allowed (NodeCount-1 or 2^NodeBits-1)
	maxSeq  int64
}

// Parts are the fields of a Snowflake id, with the time as Unix milliseconds.
type Parts struct {
	UnixMilli int64
	Node      int64
	Seq       int64
}

// Preset Snowflake layouts; see schema/ids.md for their sources.
var presets = map[string]SnowflakeConfig{
	// Tributary's tributary.next_id() (schema/ids.md). Its source names 41
	// time bits, but with 13+10 more bits the 41st is the bigint sign bit, so the
	// usable field is 40 bits: ids stay positive until 2058-11-03.
	"seed000": {Name: "seed000", EpochMS: 1704067200000, TimeBits: 40, NodeBits: 13, SeqBits: 10},
	// QuickCart order ids: epoch 2026-01-01, 10 worker, 12 seq bits.
	"quickcart": {Name: "quickcart", EpochMS: 1767225600000, TimeBits: 41, NodeBits: 10, SeqBits: 12},
	// Twitter Snowflake: epoch 2010-11-04T01:42:54.657Z, 5 datacenter + 5
	// worker bits, 12 sequence bits.
	"twitter": {Name: "twitter", EpochMS: 1288834974657, TimeBits: 41, NodeBits: 10, SeqBits: 12, DatacenterBits: 5},
	// Instagram (blog "Sharding & IDs at Instagram", 2011): 41 bits of ms,
	// 13 shard bits, 10 sequence bits; as for seed000 the 41st time bit is
	// the sign bit. The epoch is the constant of the blog's next_id()
	// (1314220021721 = 2011-08-24T21:07:01.721Z), which is what published
	// Instagram media ids decode with; the blog's prose example uses
	// 2011-01-01 for illustration only.
	"instagram": {Name: "instagram", EpochMS: 1314220021721, TimeBits: 40, NodeBits: 13, SeqBits: 10},
}

// maxEpochMS keeps epoch + time field inside time.Time's UnixMilli range with
// a wide margin (year ~292 million is where int64 ms end).
const maxEpochMS = 1 << 52

// NewSnowflake validates cfg and returns the layout.
func NewSnowflake(cfg SnowflakeConfig) (Snowflake, error) {
	switch {
	case cfg.Name == "":
		return Snowflake{}, fmt.Errorf("snowflake layout needs a name: %w", ErrInvalidLayout)
	case cfg.TimeBits == 0:
		return Snowflake{}, fmt.Errorf("snowflake %s: time bits must be > 0: %w", cfg.Name, ErrInvalidLayout)
	case cfg.TimeBits > 63 || cfg.NodeBits > 63 || cfg.SeqBits > 63 ||
		cfg.TimeBits+cfg.NodeBits+cfg.SeqBits > 63:
		return Snowflake{}, fmt.Errorf("snowflake %s: %d+%d+%d bits exceed 63: %w",
			cfg.Name, cfg.TimeBits, cfg.NodeBits, cfg.SeqBits, ErrInvalidLayout)
	case cfg.DatacenterBits > cfg.NodeBits:
		return Snowflake{}, fmt.Errorf("snowflake %s: %d datacenter bits exceed %d node bits: %w",
			cfg.Name, cfg.DatacenterBits, cfg.NodeBits, ErrInvalidLayout)
	case cfg.EpochMS < 0 || cfg.EpochMS > maxEpochMS:
		return Snowflake{}, fmt.Errorf("snowflake %s: epoch %d ms out of range: %w", cfg.Name, cfg.EpochMS, ErrInvalidLayout)
	case cfg.NodeCount < 0 || cfg.NodeCount > int64(1)<<cfg.NodeBits:
		return Snowflake{}, fmt.Errorf("snowflake %s: node count %d does not fit %d bits: %w",
			cfg.Name, cfg.NodeCount, cfg.NodeBits, ErrInvalidLayout)
	}
	s := Snowflake{
		cfg:     cfg,
		maxTime: int64(1)<<cfg.TimeBits - 1,
		maxNode: int64(1)<<cfg.NodeBits - 1,
		maxSeq:  int64(1)<<cfg.SeqBits - 1,
	}
	if cfg.NodeCount > 0 {
		s.maxNode = cfg.NodeCount - 1
	}
	return s, nil
}

// Preset returns the named preset Snowflake layout ("seed000", "quickcart",
// "twitter", "instagram").
func Preset(name string) (Snowflake, error) {
	cfg, ok := presets[name]
	if !ok {
		return Snowflake{}, fmt.Errorf("snowflake preset %q: %w", name, ErrUnknownLayout)
	}
	return NewSnowflake(cfg)
}

// WithNodeCount returns a copy of s that refuses node fields >= n.
func (s Snowflake) WithNodeCount(n int64) (Snowflake, error) {
	cfg := s.cfg
	cfg.NodeCount = n
	return NewSnowflake(cfg)
}

// Name implements Layout. With a node count it is "<name>:<count>", the
// form Lookup accepts.
func (s Snowflake) Name() string {
	if s.cfg.NodeCount > 0 {
		return s.cfg.Name + ":" + strconv.FormatInt(s.cfg.NodeCount, 10)
	}
	return s.cfg.Name
}

// Config returns the layout's parameters.
func (s Snowflake) Config() SnowflakeConfig { return s.cfg }

// MaxTime is the latest creation time the layout can express.
func (s Snowflake) MaxTime() time.Time {
	return time.UnixMilli(s.cfg.EpochMS + s.maxTime).UTC()
}

// Encode packs p into an id. It refuses times before the epoch or beyond
// the time field, and node or sequence values that do not fit.
func (s Snowflake) Encode(p Parts) (int64, error) {
	t := p.UnixMilli - s.cfg.EpochMS
	if p.UnixMilli < s.cfg.EpochMS || t > s.maxTime {
		return 0, fmt.Errorf("encode %s: time %d ms outside [%d, %d]: %w",
			s.cfg.Name, p.UnixMilli, s.cfg.EpochMS, s.cfg.EpochMS+s.maxTime, ErrRange)
	}
	if p.Node < 0 || p.Node > s.maxNode {
		return 0, fmt.Errorf("encode %s: node %d outside [0, %d]: %w", s.cfg.Name, p.Node, s.maxNode, ErrShard)
	}
	if p.Seq < 0 || p.Seq > s.maxSeq {
		return 0, fmt.Errorf("encode %s: sequence %d outside [0, %d]: %w", s.cfg.Name, p.Seq, s.maxSeq, ErrRange)
	}
	return t<<(s.cfg.NodeBits+s.cfg.SeqBits) | p.Node<<s.cfg.SeqBits | p.Seq, nil
}

// Split unpacks id into its fields, refusing negative ids, bits above the
// layout's width and node fields beyond the node count.
func (s Snowflake) Split(id int64) (Parts, error) {
	if id < 0 {
		return Parts{}, fmt.Errorf("negative: %w", ErrRange)
	}
	t := id >> (s.cfg.NodeBits + s.cfg.SeqBits)
	if t > s.maxTime {
		return Parts{}, fmt.Errorf("time field %d beyond %d bits: %w", t, s.cfg.TimeBits, ErrRange)
	}
	node := (id >> s.cfg.SeqBits) & (int64(1)<<s.cfg.NodeBits - 1)
	if node > s.maxNode {
		return Parts{}, fmt.Errorf("node %d, configured count %d: %w", node, s.cfg.NodeCount, ErrShard)
	}
	return Parts{UnixMilli: s.cfg.EpochMS + t, Node: node, Seq: id & s.maxSeq}, nil
}

// Decode implements Layout for the decimal text of a bigint id.
func (s Snowflake) Decode(id string) (Decoded, error) {
	v, err := parseDecimal(id, false)
	if err != nil {
		return Decoded{}, decodeErr(s.Name(), id, err)
	}
	p, err := s.Split(v)
	if err != nil {
		return Decoded{}, decodeErr(s.Name(), id, err)
	}
	d := Decoded{
		Kind:     KindSnowflake,
		Layout:   s.Name(),
		Time:     time.UnixMilli(p.UnixMilli).UTC(),
		Shard:    int(p.Node),
		HasShard: true,
		Sequence: p.Seq,
		Global:   true,
	}
	if s.cfg.DatacenterBits > 0 {
		workerBits := s.cfg.NodeBits - s.cfg.DatacenterBits
		d.Datacenter = int(p.Node >> workerBits)
		d.Worker = int(p.Node & (int64(1)<<workerBits - 1))
	}
	return d, nil
}
