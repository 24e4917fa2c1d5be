package verify

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
)

// Shard is one source shard.
type Shard struct {
	ID int
	// DSN is a PostgreSQL connection string; it may hold a password, so it
	// only ever comes from the environment and never appears in errors.
	DSN string
}

// ClickHouse is where the loader writes, as the binaries' ClickHouse
// flags give it.
type ClickHouse = chstore.Conn

// Config is what Run checks and how.
type Config struct {
	// Shards are every shard the tables live on. An API copy for a shard
	// not listed here is reported as extra.
	Shards []Shard
	Tables *tables.Config
	// APIURL is the API's base URL, e.g. http://127.0.0.1:8080.
	APIURL string
	// APIToken, if set, is sent as the bearer token of every API request
	// (it needs documents:read, rows:read of every table and revenue:read,
	// or admin). APICAFile, if set, is the PEM bundle trusted to sign an
	// https APIURL's certificate instead of the system's.
	APIToken, APICAFile string
	ClickHouse          ClickHouse
	// Sample bounds the ids checked per table and shard: with more live
	// rows than this, a random sample of this many is checked. 0: all.
	Sample int
	// APISample bounds, per table and shard, the ids of those checked that
	// are looked up through the API one by one (a random subset); the
	// others are compared with the same rows read from ClickHouse in bulk,
	// as the API's by-id read reads them (chrows.go). 0: every id through
	// the API. Tables whose ids are not integers always go through the
	// API, and so does every difference before it is reported.
	APISample int
	// Wait bounds each wait for the API's watermarks to reach the shards'
	// WAL positions.
	Wait time.Duration
	// Concurrency is the number of API requests in flight.
	Concurrency int
	// ShardTimeout bounds every query to a shard; ClickHouse queries and
	// API requests get the same bound.
	ShardTimeout time.Duration
	// MaxDifferences is how many differences the report lists in detail
	// (all are counted).
	MaxDifferences int
	// Log receives progress; nil discards it.
	Log *slog.Logger
	// ShowProgress, when set, gets each table's comparison progress (ids
	// checked of ids) as it goes, and once more with final set when the
	// table is done (cmd/verify: a bar on a terminal, progress.Terminal).
	ShowProgress func(key string, s progress.Status, final bool)
	// HTTPClient is used for the API if set.
	HTTPClient *http.Client
	// Ring is the published ring map, if the loaders run with one: revenue
	// rows count on the owner of their workspace only, as the API counts
	// them.
	Ring *ring.Map
}

// Validate reports every missing or invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Shards) == 0 {
		errs = append(errs, errors.New("no shards given"))
	}
	seen := map[int]bool{}
	for _, s := range c.Shards {
		if s.ID < 0 || s.ID > 65535 {
			errs = append(errs, fmt.Errorf("shard %d: out of range 0..65535", s.ID))
		}
		if seen[s.ID] {
			errs = append(errs, fmt.Errorf("shard %d given twice", s.ID))
		}
		seen[s.ID] = true
		if s.DSN == "" {
			errs = append(errs, fmt.Errorf("shard %d: empty DSN", s.ID))
		}
	}
	if c.Tables == nil || len(c.Tables.Tables) == 0 {
		errs = append(errs, errors.New("no tables configured"))
	}
	if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("API URL %q is not an http(s) URL", c.APIURL))
	}
	if c.ClickHouse.Addr == "" {
		errs = append(errs, errors.New("ClickHouse address is required"))
	}
	if c.ClickHouse.Database == "" {
		errs = append(errs, errors.New("ClickHouse database is required"))
	}
	if c.Sample < 0 {
		errs = append(errs, errors.New("sample must be >= 0 (0: all rows)"))
	}
	if c.APISample < 0 {
		errs = append(errs, errors.New("API sample must be >= 0 (0: every id through the API)"))
	}
	if c.Wait < 0 {
		errs = append(errs, errors.New("wait must be >= 0"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("concurrency must be >= 1"))
	}
	if c.ShardTimeout <= 0 {
		errs = append(errs, errors.New("shard timeout must be > 0"))
	}
	if c.MaxDifferences < 0 {
		errs = append(errs, errors.New("max differences must be >= 0"))
	}
	return errors.Join(errs...)
}

// ShardsFromFleet reads the shards of the fleet file at path (see
// internal/fleet) with their DSNs; getenv is os.Getenv outside tests. Every
// shard listed is checked, whatever its number.
func ShardsFromFleet(path string, getenv func(string) string) ([]Shard, error) {
	f, err := fleet.Load(path)
	if err != nil {
		return nil, err
	}
	eps, err := f.Resolve(getenv)
	if err != nil {
		return nil, err
	}
	shards := make([]Shard, len(eps))
	for i, e := range eps {
		shards[i] = Shard{ID: e.Number, DSN: e.DSN}
	}
	return shards, nil
}
