package decode

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
