package tests

import (
	"context"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// scratchStore opens a store on a new ClickHouse database named prefix and
// a random suffix, dropped when the test ends, and returns it with the
// database's name.
func scratchStore(tb testing.TB, prefix string) (*chstore.Store, string) {
	tb.Helper()
	st := loadStack(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := prefix + randSuffix()
	store, err := chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: db})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		store.Conn().Exec(ctx, "DROP DATABASE IF EXISTS "+chstore.Quote(db)) //nolint:errcheck // best effort
		store.Close()
	})
	return store, db
}
