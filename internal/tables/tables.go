// Package tables is the per-table configuration shared by the reader, the
// loader and the API: which source tables are replicated, which column holds
// the row's id, which id layout that id uses, and which column is the shard
// key. It is loaded from a JSON file the operators publish (see
// deploy/local/tables.json for the demo) and validated before anything
// connects.
package tables

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Table is the configuration of one replicated table.
type Table struct {
	// Schema and Name identify the source table (Schema defaults to "public").
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// IDColumn holds the row's id; it must be part of the replica identity so
	// that deletes carry it.
	IDColumn string `json:"id_column"`
	// IDLayout names the id layout (see schema/ids.md), e.g. "seed000",
	// "uuidv7", "serial". "serial" ids are per-shard: collisions across
	// shards are expected and reported, never merged.
	IDLayout string `json:"id_layout"`
	// ShardKey is the column the ring map routes by (e.g. workspace_id);
	// empty if the table is not placed by the ring map.
	ShardKey string `json:"shard_key,omitempty"`
	// Topic overrides the Kafka topic name (default: TopicPrefix + Name).
	Topic string `json:"topic,omitempty"`
}

// Config is the whole table configuration file.
type Config struct {
	// TopicPrefix prefixes default topic names (default "tributary.").
	TopicPrefix string  `json:"topic_prefix"`
	Tables      []Table `json:"tables"`
}

// identifier is what we accept as a table or column name: it ends up quoted
// in PostgreSQL and ClickHouse DDL, but refusing anything exotic keeps error
// messages and topic names sane.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("table config: %w", err)
	}
	return Parse(b)
}

// Parse decodes and validates configuration JSON, filling defaults.
func Parse(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("table config: %w", err)
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = "tributary."
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks the configuration and fills per-table defaults.
func (c *Config) Validate() error {
	if len(c.Tables) == 0 {
		return errors.New("table config: no tables configured")
	}
	seen := map[string]bool{}
	var errs []error
	for i := range c.Tables {
		t := &c.Tables[i]
		if t.Schema == "" {
			t.Schema = "public"
		}
		if t.Topic == "" {
			t.Topic = c.TopicPrefix + t.Name
		}
		for what, v := range map[string]string{"schema": t.Schema, "name": t.Name, "id_column": t.IDColumn} {
			if !identifier.MatchString(v) {
				errs = append(errs, fmt.Errorf("table %d: %s %q is not a plain identifier", i, what, v))
			}
		}
		if t.ShardKey != "" && !identifier.MatchString(t.ShardKey) {
			errs = append(errs, fmt.Errorf("table %s: shard_key %q is not a plain identifier", t.Name, t.ShardKey))
		}
		if t.IDLayout == "" {
			errs = append(errs, fmt.Errorf("table %s: id_layout is required", t.Name))
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("table %s: configured twice (table names must be unique across schemas)", t.Name))
		}
		seen[t.Name] = true
	}
	return errors.Join(errs...)
}

// ByName returns the table with the given (unqualified) name.
func (c *Config) ByName(name string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Name == name {
			return &c.Tables[i], true
		}
	}
	return nil, false
}

// BySource returns the table for a source relation.
func (c *Config) BySource(schema, name string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Schema == schema && c.Tables[i].Name == name {
			return &c.Tables[i], true
		}
	}
	return nil, false
}

// Topics lists the Kafka topics of all tables.
func (c *Config) Topics() []string {
	out := make([]string, len(c.Tables))
	for i, t := range c.Tables {
		out[i] = t.Topic
	}
	return out
}

// ByTopic returns the table written to topic.
func (c *Config) ByTopic(topic string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Topic == topic {
			return &c.Tables[i], true
		}
	}
	return nil, false
}
