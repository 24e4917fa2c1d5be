package dedupe

import (
	"strings"
	"testing"
	"unsafe"
)

func img(v uint64, body string) Image {
	return Image{Version: v, Values: map[string]any{"body": body}}
}

// TestImagesNewestWins: the cache holds the newest version put, whatever
// the order; an older put (a stale redelivery) never replaces it.
func TestImagesNewestWins(t *testing.T) {
	k := Key{Table: "documents", ID: "1", Shard: 0}
	tests := []struct {
		name     string
		puts     []Image
		wantVer  uint64
		wantBody string
	}{
		{"in order", []Image{img(1, "a"), img(2, "b"), img(3, "c")}, 3, "c"},
		{"stale redelivery after newer", []Image{img(1, "a"), img(3, "c"), img(2, "b")}, 3, "c"},
		{"same version again", []Image{img(2, "b"), img(2, "other")}, 2, "b"},
		{"tombstone is newest", []Image{img(1, "a"), {Version: 2, Deleted: true}}, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewImages(1 << 20)
			for _, p := range tc.puts {
				c.Put(k, p)
			}
			got, ok := c.Get(k)
			if !ok || got.Version != tc.wantVer {
				t.Fatalf("Get = %+v, %v; want version %d", got, ok, tc.wantVer)
			}
			if b, _ := got.Values["body"].(string); b != tc.wantBody {
				t.Errorf("body %q, want %q", b, tc.wantBody)
			}
		})
	}
}

// TestImagesTooLargeDropsOlder: a newer version too large to keep removes
// the older image instead of leaving it as a wrong base.
func TestImagesTooLargeDropsOlder(t *testing.T) {
	c := NewImages(4096)
	k := Key{Table: "documents", ID: "1"}
	c.Put(k, img(1, "small"))
	c.Put(k, img(2, strings.Repeat("x", 4096)))
	if got, ok := c.Get(k); ok {
		t.Fatalf("after a too-large newer version, Get = version %d; want nothing", got.Version)
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("Len %d Bytes %d, want 0 0", c.Len(), c.Bytes())
	}
}

// TestImagesBudget: bytes stay within the budget, old images are evicted
// and counted, recent ones kept.
func TestImagesBudget(t *testing.T) {
	const budget = 64 << 10
	c := NewImages(budget)
	body := strings.Repeat("b", 1000)
	for i := range 1000 {
		c.Put(Key{Table: "t", ID: string(rune('a'+i%26)) + strings.Repeat("z", i/26)}, img(uint64(i+1), body))
		if c.Bytes() > budget {
			t.Fatalf("after %d puts: %d bytes > budget %d", i+1, c.Bytes(), budget)
		}
	}
	if c.Evicted() == 0 {
		t.Error("nothing evicted after 1 MB of puts into a 64 KiB budget")
	}
	last := Key{Table: "t", ID: string(rune('a'+999%26)) + strings.Repeat("z", 999/26)}
	if _, ok := c.Get(last); !ok {
		t.Error("the most recent image was evicted")
	}
	if int(c.Evicted())+c.Len() != 1000 {
		t.Errorf("evicted %d + held %d != 1000 distinct keys put", c.Evicted(), c.Len())
	}
}

// TestImagesForget: ForgetTable drops one table's images only; Forget
// drops all.
func TestImagesForget(t *testing.T) {
	c := NewImages(1 << 20)
	a, b := Key{Table: "a", ID: "1"}, Key{Table: "b", ID: "1"}
	c.Put(a, img(1, "x"))
	c.Put(b, img(1, "y"))
	c.ForgetTable("a")
	if _, ok := c.Get(a); ok {
		t.Error("image of table a kept after ForgetTable(a)")
	}
	if _, ok := c.Get(b); !ok {
		t.Error("image of table b dropped by ForgetTable(a)")
	}
	c.Forget()
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("after Forget: Len %d Bytes %d", c.Len(), c.Bytes())
	}
	// A version older than a forgotten one is accepted again: forgetting
	// is for when newer versions may exist elsewhere.
	c.Put(a, img(1, "x"))
	if _, ok := c.Get(a); !ok {
		t.Error("put after Forget not kept")
	}
}

// TestImageCovers: an image serves as a base only for columns it has; a
// tombstone answers for every column (no base).
func TestImageCovers(t *testing.T) {
	tests := []struct {
		im   Image
		cols []string
		want bool
	}{
		{img(1, "x"), []string{"body"}, true},
		{img(1, "x"), []string{"body", "tags"}, false},
		{Image{Version: 1, Values: map[string]any{"body": nil}}, []string{"body"}, true}, // NULL is a value
		{Image{Version: 1, Deleted: true}, []string{"body"}, true},
	}
	for i, tc := range tests {
		if got := tc.im.Covers(tc.cols); got != tc.want {
			t.Errorf("%d: Covers(%v) = %v, want %v", i, tc.cols, got, tc.want)
		}
	}
}

// TestImagesClonesID: the key kept does not pin the caller's string (a
// slice of a whole decoded record).
func TestImagesClonesID(t *testing.T) {
	c := NewImages(1 << 20)
	rec := "xxxxxxxx42yyyyyyyy"
	c.Put(Key{Table: "t", ID: rec[8:10]}, img(1, "b"))
	for k := range c.cur {
		if k.ID != "42" || unsafe.StringData(k.ID) == unsafe.StringData(rec[8:10]) {
			t.Errorf("key id %q", k.ID)
		}
	}
}
