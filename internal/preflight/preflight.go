// Package preflight checks a table config against live shards before the
// first start, and says what is wrong, one problem a line: every configured
// table exists, its columns have types the pipeline maps, its replica
// identity carries the id, the role may replicate it (REPLICATION, SELECT,
// the publication), a sample of its ids decodes under its id_layout and
// names the shard they were read from, and the columns the revenue, moves
// and search sections name exist with types those features can use. It
// connects with the reader's DSN (the fleet file's reader_dsn_*, else
// dsn_*), because the reader's privileges are what must suffice, and only
// reads (catalogs, and a few ids per table).
//
// The checks mirror what the components do (internal/reader's replica
// identity and publication checks, internal/chstore's type mapping,
// internal/ids' decoding), so a clean check means the reader will not stop
// on these problems at start.
package preflight

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/pgdsn"
	"github.com/tributary/tributary/internal/tables"
)

// Config is what to check and where.
type Config struct {
	Tables *tables.Config
	// Shards are the shards to check, each with the reader's DSN.
	Shards []fleet.Endpoint
	// Publication is the publication the readers use.
	Publication string
	// Sample is how many ids per table and shard are decoded.
	Sample int
	// Timeout bounds each shard's whole check.
	Timeout time.Duration
	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// DefaultSample is the ids decoded per table and shard by default.
const DefaultSample = 100

// Problem is one thing wrong on one shard.
type Problem struct {
	Shard     int
	ShardName string
	// Table is the configured table concerned ("" for the shard as a
	// whole); Field the setting of the table config concerned, e.g.
	// shard_key or revenue.amount_column ("" when none).
	Table, Field string
	// Message says what is wrong and how to fix it.
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "shard %d", p.Shard)
	if p.ShardName != "" {
		fmt.Fprintf(&b, " (%s)", p.ShardName)
	}
	if p.Table != "" {
		b.WriteString(": table " + p.Table)
	}
	if p.Field != "" {
		b.WriteString(": " + p.Field)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// Run checks every shard (a few at once) and returns the problems found,
// ordered by shard. A shard that cannot be reached is a problem, not an
// error; errors are for a canceled ctx only.
func Run(ctx context.Context, cfg Config) ([]Problem, error) {
	if cfg.Sample <= 0 {
		cfg.Sample = DefaultSample
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var mu sync.Mutex
	var all []Problem
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, s := range cfg.Shards {
		g.Go(func() error {
			sctx, cancel := context.WithTimeout(gctx, cfg.Timeout)
			defer cancel()
			c := &shardCheck{cfg: cfg, shard: s}
			c.run(sctx)
			log.Info("shard checked", slog.Int("shard", s.Number), slog.Int("problems", len(c.problems)))
			mu.Lock()
			all = append(all, c.problems...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(all, func(a, b Problem) int { return a.Shard - b.Shard })
	return all, nil
}

// shardCheck is the check of one shard; one goroutine owns it.
type shardCheck struct {
	cfg      Config
	shard    fleet.Endpoint
	conn     *pgx.Conn
	role     string
	problems []Problem
}

func (c *shardCheck) add(table, field, format string, args ...any) {
	c.problems = append(c.problems, Problem{Shard: c.shard.Number, ShardName: c.shard.Name,
		Table: table, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (c *shardCheck) run(ctx context.Context) {
	if err := pgdsn.Check(c.shard.DSN); err != nil { // pgx's error may show some of the password
		c.add("", "", "the reader's DSN: %v", err)
		return
	}
	conn, err := pgx.Connect(ctx, c.shard.DSN)
	if err != nil {
		c.add("", "", "cannot connect with the reader's DSN: %v", redact(err))
		return
	}
	defer conn.Close(context.Background())
	c.conn = conn
	if !c.server(ctx) {
		return
	}
	tabs := map[string]*table{}
	for i := range c.cfg.Tables.Tables {
		t := &c.cfg.Tables.Tables[i]
		tab, ok := c.table(ctx, t)
		if ok {
			tabs[t.Name] = tab
		}
	}
	c.publication(ctx, tabs)
	c.features(tabs)
	for i := range c.cfg.Tables.Tables {
		t := &c.cfg.Tables.Tables[i]
		if tab := tabs[t.Name]; tab != nil && tab.readable && !t.Composite() { // a key of several columns decodes nothing
			c.sampleIDs(ctx, t, tab)
		}
	}
}

// redact drops what a connection error may echo of the DSN (a password).
func redact(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "password="); i >= 0 {
		msg = msg[:i] + "password=..."
	}
	return msg
}

// query runs a catalog query, turning a failure into a problem.
func (c *shardCheck) query(ctx context.Context, what string, sql string, args []any, dest ...any) bool {
	if err := c.conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		c.add("", "", "%s: %v", what, err)
		return false
	}
	return true
}
