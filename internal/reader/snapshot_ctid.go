package reader

// Tables without a primary key or replica identity index (REPLICA
// IDENTITY FULL) have no key to page by. They are copied in ranges of heap
// blocks instead, chunk by chunk with TID range scans (PostgreSQL 14+:
// "ctid >= '(b,0)' AND ctid < '(e,0)'" reads only those blocks), resumable
// like the keyed ranges: a range's After is the next block to copy.
//
// Why that is exact (with the argument at the top of snapshot.go): only
// rows last changed before the consistent point C need the copy, every
// later change is streamed. Such a row's tuple does not move while the
// table keeps its file: an UPDATE writes a new version (a change after C,
// streamed), plain VACUUM removes dead tuples only and truncates only
// empty trailing pages. And it sits in a block below the table's size
// when the plan was made (after C): heaps grow only at the end. So the
// plan's blocks [0, size) cover it, and whichever chunk reads its block
// sees it. What does move tuples is a rewrite of the table (VACUUM FULL,
// CLUSTER, TRUNCATE, an ALTER TABLE that rewrites), which gives it a new
// file: the plan records the file (pg_relation_filenode), every chunk
// checks it after reading, and a rewrite restarts the table's copy from
// block 0 in the new file (errTableRewritten; the rows copied before are
// harmless duplicates).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// errTableRewritten is returned when a table copied by ctid ranges got a
// new file during its copy; copySnapshot then plans it again.
var errTableRewritten = errors.New("table rewritten during its copy")

// defaultRowsPerBlock is assumed when a table has no row estimate yet
// (about 100-byte rows in 8 kB pages).
const defaultRowsPerBlock = 60

// relFile returns a table's current file node and its size in blocks;
// filenode 0 when the table has no storage of its own (a partitioned
// table: it is copied in one chunk, as a whole). The file node is read
// first: if a rewrite lands between the two, the size is the new file's
// and the node the old one's, which the chunks' checks then catch.
func relFile(ctx context.Context, conn *pgx.Conn, t tables.Table) (filenode uint32, blocks int64, err error) {
	var fn *int64
	err = conn.QueryRow(ctx, `SELECT pg_relation_filenode(c.oid)::int8,
		       pg_relation_size(c.oid) / current_setting('block_size')::int8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&fn, &blocks)
	if err != nil {
		return 0, 0, fmt.Errorf("file of %s.%s: %w", t.Schema, t.Name, err)
	}
	if fn == nil {
		return 0, 0, nil
	}
	return uint32(*fn), blocks, nil
}

// planCtid turns a keyless table's plan into block ranges: blocks
// [0, blocks) of file filenode, cut into up to maxRanges ranges of whole
// chunks, chunks of about chunkRows rows (by the row estimate).
func planCtid(tp *tableProgress, filenode uint32, blocks int64, maxRanges, chunkRows int) {
	perBlock := int64(defaultRowsPerBlock)
	if tp.Estimate > 0 && blocks > 0 {
		perBlock = max(1, tp.Estimate/blocks)
	}
	chunk := max(1, int64(chunkRows)/perBlock)
	tp.Ctid, tp.Filenode, tp.ChunkBlocks = true, filenode, chunk
	n := max(1, min(int64(maxRanges), blocks/chunk))
	if tp.Estimate > 0 && tp.Estimate < int64(2*chunkRows) {
		n = 1
	}
	tp.Ranges = make([]rangeProgress, 0, n)
	for i := int64(0); i < n; i++ {
		lo, hi := strconv.FormatInt(i*blocks/n, 10), strconv.FormatInt((i+1)*blocks/n, 10)
		tp.Ranges = append(tp.Ranges, rangeProgress{Lo: &lo, Hi: &hi})
	}
}

// ctidBounds returns the next block to copy and the range's end (both
// block numbers; the end is exclusive).
func ctidBounds(rg *rangeProgress) (next, end int64, err error) {
	if rg.Lo == nil || rg.Hi == nil {
		return 0, 0, errors.New("ctid range without bounds")
	}
	from := *rg.Lo
	if len(rg.After) == 1 {
		from = rg.After[0]
	}
	if next, err = strconv.ParseInt(from, 10, 64); err == nil {
		end, err = strconv.ParseInt(*rg.Hi, 10, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("ctid range: %w", err)
	}
	return next, end, nil
}

// ctidChunkQuery selects the rows in blocks [from, to).
func ctidChunkQuery(sel selection, from, to int64) (string, [][]byte) {
	q := sel.from + " WHERE ctid >= $1::tid AND ctid < $2::tid"
	if sel.filter != "" {
		q += " AND " + sel.filter
	}
	return q,
		[][]byte{[]byte("(" + strconv.FormatInt(from, 10) + ",0)"), []byte("(" + strconv.FormatInt(to, 10) + ",0)")}
}

// copyCtidRange copies one block range of a keyless table, chunk by
// chunk, from its stored position (see copyRange for pctx).
func (r *Reader) copyCtidRange(ctx, pctx context.Context, conn *pgx.Conn, enc *envelope.Encoder, pace *pacer, prog *snapProgress,
	tab *snapTable, tp *tableProgress, ti, ri int, rg rangeProgress, cp envelope.LSN) error {
	t := tab.t
	next, end, err := ctidBounds(&rg)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", t.Name, err)
	}
	img := newRowImage(tab)
	for {
		if err := pace.wait(ctx, r.cfg.SnapshotChunkRows); err != nil {
			return err
		}
		if err := prog.failure(); err != nil {
			return fmt.Errorf("snapshot produce: %w", err)
		}
		to := min(next+tp.ChunkBlocks, end)
		q, args := ctidChunkQuery(tab.sel, next, to)
		c := prog.open(ti, ri)
		acked := r.chunkAcked(prog, c)
		now := time.Now().UTC()
		res := conn.PgConn().ExecParams(ctx, q, args, nil, nil, []int16{0})
		var n int64
		for res.NextRow() {
			if err := r.produceSnapRow(pctx, enc, img, tab, res.Values(), now, cp, acked); err != nil {
				res.Close()
				return err
			}
			n++
		}
		if _, err := res.Close(); err != nil {
			return fmt.Errorf("snapshot %s: %w", t.Name, err) // c stays unsealed
		}
		// The blocks read were the planned file's only if it is still
		// the table's file now (file nodes are never reused for it).
		fn, _, err := relFile(ctx, conn, t)
		if err != nil {
			return err
		}
		if fn != tp.Filenode {
			return fmt.Errorf("snapshot %s: %w (file %d, planned %d: VACUUM FULL, CLUSTER, TRUNCATE or a rewriting ALTER TABLE); its copy starts again",
				t.Name, errTableRewritten, fn, tp.Filenode)
		}
		prog.seal(c, n, []string{strconv.FormatInt(to, 10)}, to >= end)
		if to >= end {
			return nil
		}
		next = to
	}
}
