package query

import (
	"context"

	"github.com/tributary/tributary/internal/chstore"
)

// KeyOwner is where a shard-key value belongs (chstore.KeyOwner).
type KeyOwner = chstore.KeyOwner

// Owners returns the owners of the given shard-key values (as text) of
// table; values never placed (or no ownership table yet) are absent.
func (q *Queries) Owners(ctx context.Context, table string, keys []string) (map[string]KeyOwner, error) {
	out, err := chstore.KeyOwners(ctx, q.conn, q.db, table, keys)
	if err != nil && chstore.IsUnknownTable(err) {
		return map[string]KeyOwner{}, nil
	}
	return out, err
}
