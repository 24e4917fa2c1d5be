package reader

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// relationID returns the relation a row change refers to.
func relationID(m decode.Message) uint32 {
	switch m := m.(type) {
	case *decode.Insert:
		return m.RelationID
	case *decode.Update:
		return m.RelationID
	case *decode.Delete:
		return m.RelationID
	}
	return 0
}

// toEvent converts a row change into an envelope. It returns a nil table
// for relations that are not configured (the publication may hold more).
func (r *Reader) toEvent(m decode.Message) (*envelope.Event, *tables.Table, error) {
	rel, ok := r.rels.Get(relationID(m))
	if !ok {
		return nil, nil, fmt.Errorf("%w: %d (no Relation message before its change)", decode.ErrUnknownRelation, relationID(m))
	}
	t, ok := r.cfg.Tables.BySource(rel.Schema, rel.Name)
	if !ok {
		return nil, nil, nil
	}
	ev := &envelope.Event{}
	if err := rel.Change(m, t.IDColumn, ev); err != nil {
		return nil, nil, err
	}
	return ev, t, nil
}

// typeLookup names user-defined column types with format_type on a
// short-lived connection of its own (the stream goroutine must not share
// the monitor's). It runs once per (oid, typmod) per session.
func (r *Reader) typeLookup(oid uint32, typmod int32) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return "", fmt.Errorf("type lookup: %w", err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT format_type($1::oid, $2)", oid, typmod).Scan(&name); err != nil {
		return "", fmt.Errorf("type lookup %d: %w", oid, err)
	}
	return name, nil
}
