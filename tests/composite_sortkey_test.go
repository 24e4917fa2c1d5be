package tests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
)

// TestCompositeKeyStoredSortKey: against ClickHouse 18.16, a store opened
// afresh reads a table's key back from its sort key (a one-column table
// and a composite one both reopen as they were), and a table stored under
// another key than the configured one — one column, then configured as
// the whole key — is an incompatible schema change naming the fix, for
// EnsureTable and Lookup alike.
func TestCompositeKeyStoredSortKey(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := "e2e_sortkey_" + randSuffix()
	open := func() *chstore.Store {
		s, err := chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := open()
	defer first.Close()
	defer first.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`") //nolint:errcheck
	cols := []envelope.Column{{Name: "tenant_id", Type: "text", Key: true}, {Name: "line_no", Type: "integer", Key: true}, {Name: "note", Type: "text"}}
	whole := []string{"tenant_id", "line_no"}
	for name, key := range map[string][]string{"one": {"line_no"}, "both": whole} {
		if _, err := first.EnsureTable(ctx, name, key, cols); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	again := open()
	defer again.Close()
	for name, key := range map[string][]string{"one": {"line_no"}, "both": whole} {
		tab, err := again.EnsureTable(ctx, name, key, cols)
		if err != nil || !slices.Equal(tab.Key, key) {
			t.Fatalf("reopen %s with key %v: %+v, %v", name, key, tab, err)
		}
	}
	fresh := open()
	defer fresh.Close()
	want := "table one is sorted by (line_no) in ClickHouse, and the table config identifies its rows by (tenant_id, line_no): rows merged under the stored key cannot be split again; drop the ClickHouse table"
	if _, err := fresh.EnsureTable(ctx, "one", whole, cols); !errors.Is(err, chstore.ErrIncompatibleSchema) || !strings.Contains(err.Error(), want) {
		t.Errorf("EnsureTable under another key: %v\nwant ErrIncompatibleSchema containing %q", err, want)
	}
	lookup := open()
	defer lookup.Close()
	if _, err := lookup.Lookup(ctx, "one", whole); !errors.Is(err, chstore.ErrIncompatibleSchema) || !strings.Contains(err.Error(), want) {
		t.Errorf("Lookup under another key: %v", err)
	}
}
