package decode

import "strconv"

// Parser decodes pgoutput messages without allocating for the common ones
// (Begin, Commit, Insert, Update, Delete, stream control).
//
// It reuses its storage: the returned Message, and every slice in it, stay
// valid only until the next Parse on the same Parser, and Tuple values and
// LogicalMessage.Content alias data. Relations.Put copies what it keeps.
// Strings (names, prefixes) are fresh copies.
//
// The zero Parser is ready to use. A Parser is not safe for concurrent use:
// it belongs to the goroutine that owns the replication connection.
type Parser struct {
	begin        Begin
	commit       Commit
	origin       Origin
	relation     Relation
	typ          Type
	insert       Insert
	update       Update
	delete       Delete
	truncate     Truncate
	logical      LogicalMessage
	streamStart  StreamStart
	streamStop   StreamStop
	streamCommit StreamCommit
	streamAbort  StreamAbort

	// Tuple storage, grown to the widest table seen and reused.
	oldTuple, newTuple Tuple
}

// Parse decodes one message with a fresh Parser: its result does not change
// on later calls, but still aliases data. Use a Parser on hot paths.
func Parse(data []byte, inStream bool) (Message, error) {
	return new(Parser).Parse(data, inStream)
}

// Parse decodes one pgoutput message (the payload of an XLogData message)
// of protocol version 1 or 2.
//
// inStream must be true for the messages between a StreamStart and its
// StreamStop, including the StreamStop, and false otherwise: inside a block
// Relation, Type, Insert, Update, Delete, Truncate and Message carry the
// transaction's XID before their fields. Begin, Commit, Stream Start, Stream
// Commit and Stream Abort are refused inside a block, Stream Stop outside.
//
// Errors are *Error values wrapping ErrTruncated, ErrUnknownMessage or
// ErrMalformed. Bytes after the end of a message are an error.
func (p *Parser) Parse(data []byte, inStream bool) (Message, error) {
	if len(data) == 0 {
		return nil, &Error{Field: "message type", Column: -1, Err: ErrTruncated, Detail: "empty message"}
	}
	r := reader{buf: data, off: 1, typ: MessageType(data[0])}
	var (
		m   Message
		err error
	)
	switch r.typ {
	case MsgInsert:
		m, err = p.parseInsert(&r, inStream)
	case MsgUpdate:
		m, err = p.parseUpdate(&r, inStream)
	case MsgDelete:
		m, err = p.parseDelete(&r, inStream)
	case MsgBegin:
		m, err = p.parseBegin(&r, inStream)
	case MsgCommit:
		m, err = p.parseCommit(&r, inStream)
	case MsgOrigin:
		m, err = p.parseOrigin(&r)
	case MsgRelation:
		m, err = p.parseRelation(&r, inStream)
	case MsgType:
		m, err = p.parseType(&r, inStream)
	case MsgTruncate:
		m, err = p.parseTruncate(&r, inStream)
	case MsgLogical:
		m, err = p.parseLogical(&r, inStream)
	case MsgStreamStart:
		m, err = p.parseStreamStart(&r, inStream)
	case MsgStreamStop:
		m, err = p.parseStreamStop(&r, inStream)
	case MsgStreamCommit:
		m, err = p.parseStreamCommit(&r, inStream)
	case MsgStreamAbort:
		m, err = p.parseStreamAbort(&r, inStream)
	default:
		detail := "type byte " + quoteByte(data[0])
		switch data[0] {
		case 'b', 'P', 'K', 'r', 'p':
			detail += ": two-phase commit messages (protocol version 3) are not supported"
		}
		return nil, r.fail(0, "message type", -1, ErrUnknownMessage, detail)
	}
	if err != nil {
		return nil, err
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return m, nil
}

// streamXID reads the XID that data messages carry inside a stream block.
func (r *reader) streamXID(inStream bool) (uint32, error) {
	if !inStream {
		return 0, nil
	}
	return r.u32("xid", -1)
}

// stream refuses a transaction-control message inside a stream block
// (or Stream Stop outside one): the caller's inStream is wrong, or the
// stream is not pgoutput's, and data messages around it would be misread.
func (r *reader) stream(inStream, want bool) error {
	if inStream == want {
		return nil
	}
	detail := r.typ.String() + " inside a stream block"
	if want {
		detail = r.typ.String() + " outside a stream block"
	}
	return r.fail(0, "message type", -1, ErrMalformed, detail)
}

func (p *Parser) parseBegin(r *reader, inStream bool) (*Begin, error) {
	if err := r.stream(inStream, false); err != nil {
		return nil, err
	}
	m := &p.begin
	var err error
	if m.FinalLSN, err = r.lsn("final lsn"); err != nil {
		return nil, err
	}
	if m.CommitTime, err = r.timestamp("commit time"); err != nil {
		return nil, err
	}
	if m.XID, err = r.u32("xid", -1); err != nil {
		return nil, err
	}
	return m, nil
}

// flags0 reads a flags byte that protocol versions 1 and 2 leave at 0.
func (r *reader) flags0() error {
	off := r.off
	f, err := r.u8("flags", -1)
	if err != nil {
		return err
	}
	if f != 0 {
		return r.fail(off, "flags", -1, ErrMalformed, "unknown flags "+quoteByte(f))
	}
	return nil
}

func (p *Parser) parseCommit(r *reader, inStream bool) (*Commit, error) {
	if err := r.stream(inStream, false); err != nil {
		return nil, err
	}
	m := &p.commit
	var err error
	if err = r.flags0(); err != nil {
		return nil, err
	}
	if m.CommitLSN, err = r.lsn("commit lsn"); err != nil {
		return nil, err
	}
	if m.EndLSN, err = r.lsn("end lsn"); err != nil {
		return nil, err
	}
	if m.CommitTime, err = r.timestamp("commit time"); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *Parser) parseOrigin(r *reader) (*Origin, error) {
	m := &p.origin
	var err error
	if m.CommitLSN, err = r.lsn("origin commit lsn"); err != nil {
		return nil, err
	}
	if m.Name, err = r.str("origin name", -1); err != nil {
		return nil, err
	}
	return m, nil
}

// minRelationColumn is the smallest encoding of a Relation column: flags,
// an empty name's NUL, type OID and modifier.
const minRelationColumn = 1 + 1 + 4 + 4

func (p *Parser) parseRelation(r *reader, inStream bool) (*Relation, error) {
	m := &p.relation
	*m = Relation{Columns: m.Columns[:0]}
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseType(r *reader, inStream bool) (*Type, error) {
	m := &p.typ
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseInsert(r *reader, inStream bool) (*Insert, error) {
	m := &p.insert
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseUpdate(r *reader, inStream bool) (*Update, error) {
	m := &p.update
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseDelete(r *reader, inStream bool) (*Delete, error) {
	m := &p.delete
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseTruncate(r *reader, inStream bool) (*Truncate, error) {
	m := &p.truncate
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseLogical(r *reader, inStream bool) (*LogicalMessage, error) {
	m := &p.logical
	var err error
	if m.XID, err = r.streamXID(inStream); err != nil {
		return nil, err
	}
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

func (p *Parser) parseStreamStart(r *reader, inStream bool) (*StreamStart, error) {
	if err := r.stream(inStream, false); err != nil {
		return nil, err
	}
	m := &p.streamStart
	var err error
	if m.XID, err = r.u32("xid", -1); err != nil {
		return nil, err
	}
	off := r.off
	f, err := r.u8("first segment", -1)
	if err != nil {
		return nil, err
	}
	if f > 1 {
		return nil, r.fail(off, "first segment", -1, ErrMalformed, "value "+quoteByte(f))
	}
	m.FirstSegment = f == 1
	return m, nil
}

func (p *Parser) parseStreamStop(r *reader, inStream bool) (*StreamStop, error) {
	if err := r.stream(inStream, true); err != nil {
		return nil, err
	}
	return &p.streamStop, nil
}

func (p *Parser) parseStreamCommit(r *reader, inStream bool) (*StreamCommit, error) {
	if err := r.stream(inStream, false); err != nil {
		return nil, err
	}
	m := &p.streamCommit
	var err error
	if m.XID, err = r.u32("xid", -1); err != nil {
		return nil, err
	}
	if err = r.flags0(); err != nil {
		return nil, err
	}
	if m.CommitLSN, err = r.lsn("commit lsn"); err != nil {
		return nil, err
	}
	if m.EndLSN, err = r.lsn("end lsn"); err != nil {
		return nil, err
	}
	if m.CommitTime, err = r.timestamp("commit time"); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *Parser) parseStreamAbort(r *reader, inStream bool) (*StreamAbort, error) {
	if err := r.stream(inStream, false); err != nil {
		return nil, err
	}
	m := &p.streamAbort
	var err error
	if m.XID, err = r.u32("xid", -1); err != nil {
		return nil, err
	}
	if m.SubXID, err = r.u32("subtransaction xid", -1); err != nil {
		return nil, err
	}
	return m, nil
}
