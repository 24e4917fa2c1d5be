package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// TestCapabilityDedupToken: the detected insert-deduplication-token
// capability matches what the server does with the setting — it accepts it
// exactly when detected, and rejects it as unknown otherwise. On 18.16 (the
// stack's server) the capability is off, so the loader never sends tokens.
func TestCapabilityDedupToken(t *testing.T) {
	store, _ := scratchStore(t, "e2e_caps_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := store.DetectCapabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Ask the server to apply the setting: it either takes it or refuses
	// it as unknown; any other error is a failure of the test itself. (A
	// SETTINGS clause in the SQL: the native protocol of 18.16 carries only
	// numeric settings.)
	var one uint8
	err = store.Conn().QueryRow(ctx, "SELECT toUInt8(1) SETTINGS "+chstore.InsertDeduplicationTokenSetting+" = 'tributary-probe'").Scan(&one)
	accepted := err == nil
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "unknown setting") {
		t.Fatalf("probe with %s failed for another reason: %v", chstore.InsertDeduplicationTokenSetting, err)
	}
	if caps.InsertDeduplicationToken != accepted {
		t.Fatalf("server %s: detected InsertDeduplicationToken=%v, but the server accepts the setting: %v (err %v)",
			caps.Version, caps.InsertDeduplicationToken, accepted, err)
	}
	if strings.HasPrefix(caps.Version, "18.") && caps.InsertDeduplicationToken {
		t.Fatalf("server %s reported insert_deduplication_token, which 18.x does not have", caps.Version)
	}
	if caps.UseInsertDeduplicationToken(false) {
		t.Fatal("tokens would be used on non-replicated tables, which ignore them")
	}
	t.Logf("server %s: insert_deduplication_token %v", caps.Version, caps.InsertDeduplicationToken)
}
