package decode

import "strconv"

// Data messages: Relation, Type, the row changes, Truncate and Message.

// minRelationColumn is the smallest encoding of a Relation column: flags,
// an empty name's NUL, type OID and modifier.
const minRelationColumn = 1 + 1 + 4 + 4

func (p *Parser) parseRelation(r *reader) (*Relation, error) {
	m := &p.relation
	*m = Relation{Columns: m.Columns[:0]}
	var err error
	if m.ID, err = r.u32("relation id", -1); err != nil {
		return nil, err
	}
	if m.Namespace, err = r.str("namespace", -1); err != nil {
		return nil, err
	}
	if m.Name, err = r.str("relation name", -1); err != nil {
		return nil, err
	}
	off := r.off
	ri, err := r.u8("replica identity", -1)
	if err != nil {
		return nil, err
	}
	switch m.ReplicaIdentity = ReplicaIdentity(ri); m.ReplicaIdentity {
	case IdentityDefault, IdentityNothing, IdentityFull, IdentityIndex:
	default:
		return nil, r.fail(off, "replica identity", -1, ErrMalformed, "identity byte "+quoteByte(ri))
	}
	off = r.off
	n, err := r.u16("column count")
	if err != nil {
		return nil, err
	}
	if int(n)*minRelationColumn > len(r.buf)-r.off {
		return nil, r.fail(off, "column count", -1, ErrTruncated,
			strconv.Itoa(int(n))+" columns, "+strconv.Itoa(len(r.buf)-r.off)+" bytes left")
	}
	for i := range int(n) {
		var c RelationColumn
		off := r.off
		f, err := r.u8("column flags", i)
		if err != nil {
			return nil, err
		}
		if c.Flags = ColumnFlags(f); c.Flags&^ColumnKey != 0 {
			return nil, r.fail(off, "column flags", i, ErrMalformed, "unknown flags "+quoteByte(f))
		}
		if c.Name, err = r.str("column name", i); err != nil {
			return nil, err
		}
		if c.TypeOID, err = r.u32("column type oid", i); err != nil {
			return nil, err
		}
		mod, err := r.u32("column type modifier", i)
		if err != nil {
			return nil, err
		}
		c.TypeMod = int32(mod)
		m.Columns = append(m.Columns, c)
	}
	return m, nil
}

func (p *Parser) parseType(r *reader) (*Type, error) {
	m := &p.typ
	var err error
	if m.OID, err = r.u32("type oid", -1); err != nil {
		return nil, err
	}
	if m.Namespace, err = r.str("namespace", -1); err != nil {
		return nil, err
	}
	if m.Name, err = r.str("type name", -1); err != nil {
		return nil, err
	}
	return m, nil
}

// marker reads a tuple marker byte and checks it against the allowed ones.
func (r *reader) marker(field string, allowed string) (byte, error) {
	off := r.off
	b, err := r.u8(field, -1)
	if err != nil {
		return 0, err
	}
	for i := range len(allowed) {
		if allowed[i] == b {
			return b, nil
		}
	}
	return 0, r.fail(off, field, -1, ErrMalformed, "marker "+quoteByte(b)+", want one of "+allowed)
}

func (p *Parser) parseInsert(r *reader) (*Insert, error) {
	m := &p.insert
	var err error
	if m.RelationID, err = r.u32("relation id", -1); err != nil {
		return nil, err
	}
	if _, err = r.marker("new tuple marker", "N"); err != nil {
		return nil, err
	}
	p.newTuple, err = r.tuple(p.newTuple)
	if err != nil {
		return nil, err
	}
	m.New = p.newTuple
	return m, nil
}

func (p *Parser) parseUpdate(r *reader) (*Update, error) {
	m := &p.update
	var err error
	if m.RelationID, err = r.u32("relation id", -1); err != nil {
		return nil, err
	}
	mk, err := r.marker("tuple marker", "KON")
	if err != nil {
		return nil, err
	}
	m.OldKind, m.Old = OldNone, nil
	if mk != 'N' {
		m.OldKind = OldKind(mk)
		if p.oldTuple, err = r.tuple(p.oldTuple); err != nil {
			return nil, err
		}
		m.Old = p.oldTuple
		if _, err = r.marker("new tuple marker", "N"); err != nil {
			return nil, err
		}
	}
	if p.newTuple, err = r.tuple(p.newTuple); err != nil {
		return nil, err
	}
	m.New = p.newTuple
	return m, nil
}

func (p *Parser) parseDelete(r *reader) (*Delete, error) {
	m := &p.delete
	var err error
	if m.RelationID, err = r.u32("relation id", -1); err != nil {
		return nil, err
	}
	mk, err := r.marker("old tuple marker", "KO")
	if err != nil {
		return nil, err
	}
	m.OldKind = OldKind(mk)
	if p.oldTuple, err = r.tuple(p.oldTuple); err != nil {
		return nil, err
	}
	m.Old = p.oldTuple
	return m, nil
}

func (p *Parser) parseTruncate(r *reader) (*Truncate, error) {
	m := &p.truncate
	var err error
	off := r.off
	n, err := r.u32("relation count", -1)
	if err != nil {
		return nil, err
	}
	if int32(n) < 0 {
		return nil, r.fail(off, "relation count", -1, ErrMalformed, "negative count "+strconv.Itoa(int(int32(n))))
	}
	off = r.off
	o, err := r.u8("options", -1)
	if err != nil {
		return nil, err
	}
	if m.Options = TruncateOptions(o); m.Options&^(TruncateCascade|TruncateRestartIdentity) != 0 {
		return nil, r.fail(off, "options", -1, ErrMalformed, "unknown option bits "+quoteByte(o))
	}
	if int(n) > (len(r.buf)-r.off)/4 {
		return nil, r.fail(r.off, "relation ids", -1, ErrTruncated,
			strconv.Itoa(int(n))+" ids, "+strconv.Itoa(len(r.buf)-r.off)+" bytes left")
	}
	m.RelationIDs = m.RelationIDs[:0]
	for i := range int(n) {
		id, err := r.u32("relation id", i)
		if err != nil {
			return nil, err
		}
		m.RelationIDs = append(m.RelationIDs, id)
	}
	return m, nil
}

func (p *Parser) parseLogical(r *reader) (*LogicalMessage, error) {
	m := &p.logical
	var err error
	off := r.off
	f, err := r.u8("flags", -1)
	if err != nil {
		return nil, err
	}
	if f > 1 {
		return nil, r.fail(off, "flags", -1, ErrMalformed, "unknown flags "+quoteByte(f))
	}
	m.Transactional = f == 1
	if m.LSN, err = r.lsn("message lsn"); err != nil {
		return nil, err
	}
	if m.Prefix, err = r.str("prefix", -1); err != nil {
		return nil, err
	}
	if m.Content, err = r.counted("content length", "content", -1); err != nil {
		return nil, err
	}
	return m, nil
}
