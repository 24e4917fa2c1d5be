package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Decoder decodes envelopes without reflection, several times faster than
// encoding/json and with far fewer allocations: the column list, repeated
// in every record of a relation, is parsed once and shared while it stays
// byte-for-byte the same, and column names used as row-image keys are
// interned. It accepts exactly what encoding/json accepts and produces the
// same Event (a differential fuzz test holds it to that).
//
// Events from one Decoder share their Columns slice with other events: treat
// it as read-only. An event's strings are slices of the record it was
// decoded from, not copies (a copy of every record was a fifth of the
// decoding time, and doubled the records' memory): the record's bytes must
// not change while the event is in use, and a string kept long after the
// event (a map key, say) keeps the whole buffer the record sits in — a
// Kafka fetch's decompressed batch — alive unless cloned (strings.Clone).
// The column list, which a Decoder keeps, is always cloned. Events are
// allocated a few dozen at a time: a kept *Event keeps its neighbours.
// Not safe for concurrent use; use one Decoder per goroutine.
type Decoder struct {
	colsRaw []byte
	cols    []Column
	names   map[string]string
	// events and vals are allocated in chunks, handed out one by one.
	events []Event
	vals   []string
}

// Decode parses and validates one envelope, like the package's Decode.
func (d *Decoder) Decode(b []byte) (*Event, error) {
	if d.names == nil {
		d.names = map[string]string{}
	}
	// The record as a string, not copied: decoded strings without escapes
	// are slices of it instead of one allocation each.
	p := parser{b: b, src: unsafe.String(unsafe.SliceData(b), len(b)), d: d}
	if len(d.events) == 0 {
		d.events = make([]Event, eventChunk)
	}
	e := &d.events[0]
	if err := p.event(e); err != nil {
		*e = Event{} // the slot is reused
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	if e.V < 1 || e.V > Version {
		v := e.V
		*e = Event{}
		return nil, fmt.Errorf("%w: %d (this build reads 1 to %d)", ErrUnsupportedVersion, v, Version)
	}
	if err := e.Validate(); err != nil {
		*e = Event{}
		return nil, err
	}
	d.events = d.events[1:]
	return e, nil
}

// Chunk sizes of a Decoder's allocations: events (about 250 B each) and
// row image values.
const (
	eventChunk = 32
	valsChunk  = 256
)

// maxDepth bounds nesting in skipped values, as encoding/json does.
const maxDepth = 10000

type parser struct {
	b   []byte
	src string // b as a string
	i   int
	d   *Decoder
	// Set by rawString: the string was taken from the input unchanged, at
	// src[fs:fe].
	fast   bool
	fs, fe int
}

// text returns what rawString last returned, as a string.
func (p *parser) text(raw []byte) string {
	if p.fast {
		return p.src[p.fs:p.fe]
	}
	return string(raw)
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (p *parser) peek() byte {
	p.ws()
	if p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

func (p *parser) expect(c byte) error {
	if p.peek() != c {
		if p.i >= len(p.b) {
			return p.errorf("unexpected end of input, want %q", c)
		}
		return p.errorf("unexpected %q, want %q", p.b[p.i], c)
	}
	p.i++
	return nil
}

// null consumes a null literal if one is next.
func (p *parser) null() bool {
	if p.peek() == 'n' && bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// object calls f for each key of an object; f must consume the value.
func (p *parser) object(f func(key []byte) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		key, err := p.rawString()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := f(key); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return p.errorf("want ',' or '}' in object")
		}
	}
}

// array calls f for each element; f must consume it.
func (p *parser) array(f func() error) error {
	if err := p.expect('['); err != nil {
		return err
	}
	if p.peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return p.errorf("want ',' or ']' in array")
		}
	}
}

// rawString returns a string's content. Without escapes it is a sub-slice of
// the input (valid UTF-8, no control characters); otherwise it is decoded by
// encoding/json, so escapes and invalid UTF-8 are treated exactly as there.
func (p *parser) rawString() ([]byte, error) {
	if p.peek() != '"' {
		return nil, p.errorf("want a string")
	}
	start := p.i
	p.i++
	ascii := true
	for p.i < len(p.b) {
		// Most bytes are plain: one table look-up each.
		b, i := p.b, p.i
		for i < len(b) && plain[b[i]] {
			i++
		}
		p.i = i
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s := p.b[start+1 : p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return p.slowString(start)
			}
			p.fast, p.fs, p.fe = true, start+1, p.i-1
			return s, nil
		case c == '\\':
			return p.slowString(start)
		case c < 0x20:
			return nil, p.errorf("control character in string")
		}
		ascii = false // c >= 0x80
		p.i++
	}
	return nil, p.errorf("unterminated string")
}

// plain marks the bytes a string's content may hold as they are: not a
// quote, a backslash, a control character or part of a multi-byte rune.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (p *parser) slowString(start int) ([]byte, error) {
	p.fast = false
	p.i = start + 1
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return nil, err
			}
			return []byte(s), nil
		case c == '\\':
			p.i += 2
		case c < 0x20:
			return nil, p.errorf("control character in string")
		default:
			p.i++
		}
	}
	return nil, p.errorf("unterminated string")
}

// str decodes a string field; null leaves it unchanged.
func (p *parser) str(dst *string) error {
	if p.null() {
		return nil
	}
	s, err := p.rawString()
	if err != nil {
		return err
	}
	*dst = p.text(s)
	return nil
}

// number returns the text of a JSON number, checking its grammar.
func (p *parser) number() ([]byte, error) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	intStart := p.i
	if n := digits(); n == 0 || (n > 1 && p.b[intStart] == '0') {
		return nil, p.errorf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	return p.b[start:p.i], nil
}

// integer decodes an integer field within [lo, hi]; null leaves it unchanged.
func (p *parser) integer(lo, hi int64, set func(int64)) error {
	if p.null() {
		return nil
	}
	if c := p.peek(); c != '-' && (c < '0' || c > '9') {
		return p.errorf("want a number")
	}
	tok, err := p.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil || v < lo || v > hi {
		return p.errorf("number %s does not fit the field", tok)
	}
	set(v)
	return nil
}

func (p *parser) boolean(dst *bool) error {
	switch {
	case p.null():
	case p.peek() == 't' && bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		*dst = true
	case p.peek() == 'f' && bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		*dst = false
	default:
		return p.errorf("want a boolean")
	}
	return nil
}

// skip consumes any JSON value, checking its syntax.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return p.errorf("nesting too deep")
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) error { return p.skip(depth + 1) })
	case c == '[':
		return p.array(func() error { return p.skip(depth + 1) })
	case c == '"':
		_, err := p.rawString()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := p.number()
		return err
	case c == 'n' && p.null():
		return nil
	default:
		var b bool
		return p.boolean(&b)
	}
}

// field resolves a key to a known name: an exact match first, then a
// case-insensitive one, as encoding/json does. The exact match starts at
// names[*next] and *next becomes the index after the match: encoders write
// the fields in one order, so the next key is usually the next name.
func field(key []byte, next *int, names ...string) string {
	for j := range names {
		k := (*next + j) % len(names)
		if string(key) == names[k] {
			*next = k + 1
			return names[k]
		}
	}
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return n
		}
	}
	return ""
}

var eventFields = []string{"v", "kind", "shard", "schema", "table", "op", "id", "lsn", "commit_lsn",
	"seq", "xid", "commit_ts", "columns", "after", "before", "partitions", "unchanged", "epoch", "partition"}

func (p *parser) event(e *Event) error {
	if p.null() {
		return p.end()
	}
	next := 0
	err := p.object(func(key []byte) error {
		switch field(key, &next, eventFields...) {
		case "v":
			return p.integer(math.MinInt, math.MaxInt, func(v int64) { e.V = int(v) })
		case "kind":
			return p.str((*string)(&e.Kind))
		case "shard":
			return p.integer(math.MinInt, math.MaxInt, func(v int64) { e.Shard = int(v) })
		case "schema":
			return p.str(&e.Schema)
		case "table":
			return p.str(&e.Table)
		case "op":
			return p.str((*string)(&e.Op))
		case "id":
			return p.str(&e.ID)
		case "lsn":
			return p.lsn(&e.LSN)
		case "commit_lsn":
			return p.lsn(&e.CommitLSN)
		case "seq":
			return p.integer(0, math.MaxUint32, func(v int64) { e.Seq = uint32(v) })
		case "xid":
			return p.integer(0, math.MaxUint32, func(v int64) { e.XID = uint32(v) })
		case "commit_ts":
			return p.time(e)
		case "columns":
			return p.columns(e)
		case "after":
			return p.row(&e.After)
		case "before":
			return p.row(&e.Before)
		case "partitions":
			return p.integer(math.MinInt32, math.MaxInt32, func(v int64) { e.Partitions = int32(v) })
		case "unchanged":
			return p.strings(&e.Unchanged)
		case "epoch":
			return p.integer(0, math.MaxUint16, func(v int64) { e.Epoch = uint16(v) })
		case "partition":
			return p.partition(e)
		}
		return p.skip(1)
	})
	if err != nil {
		return err
	}
	return p.end()
}

func (p *parser) end() error {
	if p.peek() != 0 {
		return p.errorf("data after the envelope")
	}
	return nil
}

// lsn decodes "X/Y". Like encoding/json with LSN.UnmarshalJSON, null is an
// error.
func (p *parser) lsn(dst *LSN) error {
	if p.null() {
		_, err := ParseLSN("")
		return err
	}
	s, err := p.rawString()
	if err != nil {
		return err
	}
	if v, ok := lsnBytes(s); ok {
		*dst = v
		return nil
	}
	v, err := ParseLSN(string(s)) // for its error, or what lsnBytes leaves to it
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// lsnBytes parses the usual LSN text, "X/Y" with 1 to 8 hex digits each,
// without allocating. It accepts only what ParseLSN accepts, and leaves
// everything else to it (ok false).
func lsnBytes(b []byte) (LSN, bool) {
	hi, lo, ok := bytes.Cut(b, []byte{'/'})
	if !ok {
		return 0, false
	}
	h, ok1 := hex32(hi)
	l, ok2 := hex32(lo)
	return LSN(uint64(h)<<32 | uint64(l)), ok1 && ok2
}

// hex32 parses 1 to 8 hex digits (either case).
func hex32(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(c)
	}
	return v, true
}

// time decodes the commit time with time.Time's own JSON rules.
func (p *parser) time(e *Event) error {
	if p.null() {
		return nil
	}
	start := p.i
	if _, err := p.rawString(); err != nil {
		return err
	}
	return e.CommitTime.UnmarshalJSON(p.b[start:p.i])
}

var columnFields = []string{"name", "type", "oid", "key", "enum", "missing"}

// columns decodes the column list, reusing the previous list when the
// bytes are the same.
func (p *parser) columns(e *Event) error {
	if p.null() {
		e.Columns = nil
		return nil
	}
	start := p.peekPos()
	if p.d.colsRaw != nil && bytes.HasPrefix(p.b[start:], p.d.colsRaw) {
		p.i = start + len(p.d.colsRaw)
		e.Columns = p.d.cols
		return nil
	}
	cols := []Column{}
	err := p.array(func() error {
		var c Column
		if p.null() {
			cols = append(cols, c)
			return nil
		}
		next := 0
		err := p.object(func(key []byte) error {
			switch field(key, &next, columnFields...) {
			case "name":
				return p.str(&c.Name)
			case "type":
				return p.str(&c.Type)
			case "oid":
				return p.integer(0, math.MaxUint32, func(v int64) { c.OID = uint32(v) })
			case "key":
				return p.boolean(&c.Key)
			case "enum":
				return p.boolean(&c.Enum)
			case "missing":
				if p.null() {
					c.Missing = nil
					return nil
				}
				var v string
				if err := p.str(&v); err != nil {
					return err
				}
				c.Missing = &v
				return nil
			}
			return p.skip(1)
		})
		cols = append(cols, c)
		return err
	})
	if err != nil {
		return err
	}
	// The list outlives the record (the Decoder keeps it, and tables are
	// built from it): its strings must not pin the record's buffer.
	for i := range cols {
		c := &cols[i]
		c.Name, c.Type = strings.Clone(c.Name), strings.Clone(c.Type)
		if c.Missing != nil {
			m := strings.Clone(*c.Missing)
			c.Missing = &m
		}
	}
	e.Columns = cols
	// A cached prefix match must end where the array ends: the raw bytes
	// are a whole array, so a longer list cannot share them as a prefix.
	p.d.colsRaw = append(p.d.colsRaw[:0], p.b[start:p.i]...)
	p.d.cols = cols
	return nil
}

func (p *parser) peekPos() int {
	p.ws()
	return p.i
}

// row decodes a row image; keys are interned (the column list's names,
// or the Decoder's). Like encoding/json, a second
// occurrence of the field merges into the first map.
func (p *parser) row(dst *map[string]*string) error {
	if p.null() {
		*dst = nil
		return nil
	}
	if *dst == nil {
		*dst = make(map[string]*string, len(p.d.cols))
	}
	m := *dst
	j := 0 // the key's position: keys usually come in column order
	return p.object(func(key []byte) error {
		var name string
		if cols := p.d.cols; j < len(cols) && string(key) == cols[j].Name {
			name = cols[j].Name
		} else if n, ok := p.d.names[string(key)]; ok {
			name = n
		} else {
			name = string(key)
			if len(p.d.names) < 4096 {
				p.d.names[name] = name
			}
		}
		j++
		if p.null() {
			m[name] = nil
			return nil
		}
		s, err := p.rawString()
		if err != nil {
			return err
		}
		d := p.d
		if len(d.vals) == 0 {
			d.vals = make([]string, valsChunk)
		}
		d.vals[0] = p.text(s)
		m[name] = &d.vals[0]
		d.vals = d.vals[1:]
		return nil
	})
}

func (p *parser) strings(dst *[]string) error {
	if p.null() {
		*dst = nil
		return nil
	}
	out := []string{}
	err := p.array(func() error {
		var s string
		err := p.str(&s)
		out = append(out, s)
		return err
	})
	*dst = out
	return err
}

// partition decodes a partition scope with encoding/json: it is rare (a
// partition truncated, detached or dropped) and small.
func (p *parser) partition(e *Event) error {
	start := p.i
	if err := p.skip(1); err != nil {
		return err
	}
	if string(bytes.TrimSpace(p.b[start:p.i])) == "null" {
		return nil
	}
	var s PartitionScope
	if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
		return p.errorf("partition: %v", err)
	}
	e.Partition = &s
	return nil
}
