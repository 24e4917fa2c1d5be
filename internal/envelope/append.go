package envelope

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Encoder appends envelopes as JSON without reflection. It caches the
// encoded column list per Columns slice (the decoder shares one per
// relation). Not safe for concurrent use.
type Encoder struct {
	cols map[*Column]encodedColumns
}

// encodedColumns is a cached column list. The copy guards against a freed
// slice whose address is reused by another relation's columns.
type encodedColumns struct {
	cols []Column
	json []byte
}

// Append appends e's JSON to dst; decoding it gives what json.Marshal's
// output gives. Map keys are written in column order when Columns is set.
func (enc *Encoder) Append(dst []byte, e *Event) []byte {
	e.V = e.version()
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = append(dst, `,"kind":`...)
	dst = appendStr(dst, string(e.Kind))
	dst = append(dst, `,"shard":`...)
	dst = strconv.AppendInt(dst, int64(e.Shard), 10)
	if e.Schema != "" {
		dst = append(dst, `,"schema":`...)
		dst = appendStr(dst, e.Schema)
	}
	if e.Table != "" {
		dst = append(dst, `,"table":`...)
		dst = appendStr(dst, e.Table)
	}
	if e.Op != "" {
		dst = append(dst, `,"op":`...)
		dst = appendStr(dst, string(e.Op))
	}
	if e.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendStr(dst, e.ID)
	}
	dst = append(dst, `,"lsn":`...)
	dst = appendLSN(dst, e.LSN)
	dst = append(dst, `,"commit_lsn":`...)
	dst = appendLSN(dst, e.CommitLSN)
	if e.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, uint64(e.Seq), 10)
	}
	if e.XID != 0 {
		dst = append(dst, `,"xid":`...)
		dst = strconv.AppendUint(dst, uint64(e.XID), 10)
	}
	dst = append(dst, `,"commit_ts":"`...)
	dst = e.CommitTime.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if len(e.Columns) > 0 {
		dst = append(dst, `,"columns":`...)
		dst = append(dst, enc.columns(e.Columns)...)
	}
	if len(e.After) > 0 {
		dst = append(dst, `,"after":`...)
		dst = appendRow(dst, e.Columns, e.After)
	}
	if len(e.Before) > 0 {
		dst = append(dst, `,"before":`...)
		dst = appendRow(dst, e.Columns, e.Before)
	}
	if e.Partitions != 0 {
		dst = append(dst, `,"partitions":`...)
		dst = strconv.AppendInt(dst, int64(e.Partitions), 10)
	}
	if e.Epoch != 0 {
		dst = append(dst, `,"epoch":`...)
		dst = strconv.AppendUint(dst, uint64(e.Epoch), 10)
	}
	if e.Partition != nil {
		// Rare (a partition truncated, detached or dropped): encoding/json.
		b, err := json.Marshal(e.Partition)
		if err == nil {
			dst = append(dst, `,"partition":`...)
			dst = append(dst, b...)
		}
	}
	if len(e.Unchanged) > 0 {
		dst = append(dst, `,"unchanged":[`...)
		for i, u := range e.Unchanged {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendStr(dst, u)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

func (enc *Encoder) columns(cols []Column) []byte {
	if c, ok := enc.cols[&cols[0]]; ok && slices.Equal(c.cols, cols) {
		return c.json
	}
	b := []byte{'['}
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendStr(b, c.Name)
		b = append(b, `,"type":`...)
		b = appendStr(b, c.Type)
		b = append(b, `,"oid":`...)
		b = strconv.AppendUint(b, uint64(c.OID), 10)
		if c.Key {
			b = append(b, `,"key":true`...)
		}
		if c.Enum {
			b = append(b, `,"enum":true`...)
		}
		if c.Missing != nil {
			b = append(b, `,"missing":`...)
			b = appendStr(b, *c.Missing)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if enc.cols == nil || len(enc.cols) > 1024 {
		enc.cols = map[*Column]encodedColumns{} // bounded: relations are few
	}
	enc.cols[&cols[0]] = encodedColumns{cols: slices.Clone(cols), json: b}
	return b
}

// appendRow writes m in column order, then any keys that are not columns.
func appendRow(dst []byte, cols []Column, m map[string]*string) []byte {
	dst = append(dst, '{')
	n := 0
	val := func(k string, v *string) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendStr(dst, k)
		dst = append(dst, ':')
		if v == nil {
			dst = append(dst, "null"...)
		} else {
			dst = appendStr(dst, *v)
		}
	}
	for _, c := range cols {
		if v, ok := m[c.Name]; ok {
			val(c.Name, v)
		}
	}
	if n < len(m) {
		for k, v := range m {
			known := false
			for _, c := range cols {
				if c.Name == k {
					known = true
					break
				}
			}
			if !known {
				val(k, v)
			}
		}
	}
	return append(dst, '}')
}

func appendLSN(dst []byte, l LSN) []byte {
	dst = append(dst, '"')
	dst = appendHex(dst, uint32(l>>32))
	dst = append(dst, '/')
	dst = appendHex(dst, uint32(l))
	return append(dst, '"')
}

func appendHex(dst []byte, v uint32) []byte {
	const hex = "0123456789ABCDEF"
	if v == 0 {
		return append(dst, '0')
	}
	var buf [8]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = hex[v&15]
		v >>= 4
	}
	return append(dst, buf[i:]...)
}

// appendStr appends s as a JSON string, escaping like encoding/json
// (HTML-safe, U+2028/2029, invalid UTF-8 as U+FFFD).
func appendStr(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
