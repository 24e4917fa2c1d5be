package decode

// Parser decodes pgoutput messages without allocating for the common ones
// (Begin, Commit, Insert, Update, Delete).
//
// It reuses its storage: the returned Message, and every slice in it, stay
// valid only until the next Parse on the same Parser, and Tuple values and
// LogicalMessage.Content alias data. Relations.Put copies what it keeps.
// Strings (names, prefixes) are fresh copies.
//
// The zero Parser is ready to use. A Parser is not safe for concurrent use:
// it belongs to the goroutine that owns the replication connection.
type Parser struct {
	begin    Begin
	commit   Commit
	origin   Origin
	relation Relation
	typ      Type
	insert   Insert
	update   Update
	delete   Delete
	truncate Truncate
	logical  LogicalMessage

	// Tuple storage, grown to the widest table seen and reused.
	oldTuple, newTuple Tuple
}

// Parse decodes one message with a fresh Parser: its result does not change
// on later calls, but still aliases data. Use a Parser on hot paths.
func Parse(data []byte) (Message, error) {
	return new(Parser).Parse(data)
}

// Parse decodes one pgoutput message (the payload of an XLogData message)
// of protocol version 1, the one Tributary asks for.
//
// Errors are *Error values wrapping ErrTruncated, ErrUnknownMessage or
// ErrMalformed. Bytes after the end of a message are an error.
func (p *Parser) Parse(data []byte) (Message, error) {
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
		m, err = p.parseInsert(&r)
	case MsgUpdate:
		m, err = p.parseUpdate(&r)
	case MsgDelete:
		m, err = p.parseDelete(&r)
	case MsgBegin:
		m, err = p.parseBegin(&r)
	case MsgCommit:
		m, err = p.parseCommit(&r)
	case MsgOrigin:
		m, err = p.parseOrigin(&r)
	case MsgRelation:
		m, err = p.parseRelation(&r)
	case MsgType:
		m, err = p.parseType(&r)
	case MsgTruncate:
		m, err = p.parseTruncate(&r)
	case MsgLogical:
		m, err = p.parseLogical(&r)
	default:
		detail := "type byte " + quoteByte(data[0])
		switch data[0] {
		case 'S', 'E', 'c', 'A':
			detail += ": protocol version 2 streaming messages (Stream Start/Stop/Commit/Abort) are not supported: Tributary asks for proto_version '1' without streaming"
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

func (p *Parser) parseBegin(r *reader) (*Begin, error) {
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

// flags0 reads a flags byte that protocol version 1 leaves at 0.
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

func (p *Parser) parseCommit(r *reader) (*Commit, error) {
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
