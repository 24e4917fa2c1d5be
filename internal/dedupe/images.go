package dedupe

import (
	"strings"

	"github.com/shopspring/decimal"
)

// Image is the newest written version of one row, reduced to the columns
// that can arrive as unchanged TOAST (the large variable-length ones): what
// a later update that leaves them out keeps.
type Image struct {
	Version uint64
	// Deleted: the newest version is a tombstone, which is no base.
	Deleted bool
	// Values are typed values by column (as chstore.Block.Value returns
	// them); a column missing here is unknown, not NULL.
	Values map[string]any
}

// Covers reports whether the image can serve as the base of an update that
// leaves cols unchanged: it has all of them, or it is a tombstone (the
// answer then is "no base", which it knows as well as ClickHouse would).
func (im Image) Covers(cols []string) bool {
	if im.Deleted {
		return true
	}
	for _, c := range cols {
		if _, ok := im.Values[c]; !ok {
			return false
		}
	}
	return true
}

// Images remembers the newest written image of recently written rows
// within a byte budget, so that an update carrying unchanged-TOAST columns
// finds its base without reading ClickHouse.
//
// It is only as good as its owner's discipline, which the loader keeps:
// every written version of a cached key passes through Put (a key's changes
// all arrive on one Kafka partition, in order, while the loader owns that
// partition), and everything is forgotten when that stops being true — a
// rebalance, a failed offset commit, a TRUNCATE or snapshot end that
// tombstones rows behind the loader's back. Put never replaces an image by
// an older version and drops the old image when it cannot keep the new
// one, so an entry is always the newest version this loader wrote.
//
// Two generations, as Versions, but bounded by bytes: writes go to the
// current generation; when it holds more than half the budget it becomes
// the old one and the previous old one is evicted. Not safe for concurrent
// use: the loader's batch goroutine owns it.
type Images struct {
	half               int64
	cur, old           map[Key]Image
	curBytes, oldBytes int64
	evicted            uint64
}

// NewImages returns a cache of at most budget bytes (approximately: the
// sizes of the values and keys plus a fixed overhead per entry). A budget
// <= 0 keeps nothing.
func NewImages(budget int64) *Images {
	return &Images{half: budget / 2, cur: map[Key]Image{}, old: map[Key]Image{}}
}

// Get returns the newest image of k, if held.
func (c *Images) Get(k Key) (Image, bool) {
	if im, ok := c.cur[k]; ok {
		return im, true
	}
	im, ok := c.old[k]
	return im, ok
}

// Put records that version im.Version of k was written with these values.
// An older version than the one held changes nothing; a newer one replaces
// it, and if the new image is too large to keep, the old one is dropped
// all the same (it is no longer the newest). The id is cloned: it may be a
// slice of a whole decoded record.
func (c *Images) Put(k Key, im Image) {
	if held, ok := c.Get(k); ok && held.Version >= im.Version {
		return
	}
	c.drop(k)
	size := imageSize(k, im)
	if size > c.half {
		return
	}
	if c.curBytes+size > c.half {
		c.evicted += uint64(len(c.old))
		c.old, c.oldBytes = c.cur, c.curBytes
		c.cur, c.curBytes = make(map[Key]Image, len(c.old)), 0
	}
	k.ID = strings.Clone(k.ID)
	c.cur[k] = im
	c.curBytes += size
}

// drop removes k from both generations.
func (c *Images) drop(k Key) {
	if im, ok := c.cur[k]; ok {
		c.curBytes -= imageSize(k, im)
		delete(c.cur, k)
	}
	if im, ok := c.old[k]; ok {
		c.oldBytes -= imageSize(k, im)
		delete(c.old, k)
	}
}

// ForgetTable drops every image of table (a TRUNCATE or snapshot end wrote
// tombstones for some of its rows).
func (c *Images) ForgetTable(table string) {
	for _, gen := range []struct {
		m     map[Key]Image
		bytes *int64
	}{{c.cur, &c.curBytes}, {c.old, &c.oldBytes}} {
		for k, im := range gen.m {
			if k.Table == table {
				*gen.bytes -= imageSize(k, im)
				delete(gen.m, k)
			}
		}
	}
}

// Forget drops everything (a rebalance: another loader may have written
// newer versions of the rows held).
func (c *Images) Forget() {
	clear(c.cur)
	clear(c.old)
	c.curBytes, c.oldBytes = 0, 0
}

// Len is the number of images held.
func (c *Images) Len() int { return len(c.cur) + len(c.old) }

// Bytes is the approximate memory the images hold.
func (c *Images) Bytes() int64 { return c.curBytes + c.oldBytes }

// Evicted is the number of images dropped for room so far.
func (c *Images) Evicted() uint64 { return c.evicted }

// entryOverhead approximates a map entry, the Image header and its values
// map.
const entryOverhead = 160

// imageSize approximates the bytes an image holds: its key, and per value
// the column name's map slot plus the value (strings and string-backed
// values by length, fixed-size values as 16-32 bytes).
func imageSize(k Key, im Image) int64 {
	n := int64(entryOverhead + len(k.ID))
	for _, v := range im.Values {
		n += 48
		switch x := v.(type) {
		case string:
			n += int64(len(x))
		case *string:
			if x != nil {
				n += int64(len(*x))
			}
		case decimal.Decimal:
			n += 32
		}
	}
	return n
}
