// Command capture records the raw pgoutput messages that a real PostgreSQL
// sends for workload.sql with protocol version 1 (the one the reader asks
// for) into ../pgoutput_v1.txt.gz. The decode tests parse that file: it is
// the check that the hand-built fixtures match what the server really
// sends.
//
// It lives under testdata so that `go build ./...` and `go test ./...` ignore
// it. Run it by hand against a scratch server with wal_level=logical (it
// drops and recreates cap_* objects, a slot and a replication origin):
//
//	go run ./internal/decode/testdata/capture -dsn postgres://postgres@127.0.0.1:55432/postgres
//
// Each output line is one message in hex.
package main

import (
	"bufio"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

//go:embed setup.sql
var setupSQL string

//go:embed workload.sql
var workloadSQL string

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:55432/postgres", "superuser DSN of a scratch database")
	out := flag.String("out", "internal/decode/testdata", "directory for the .txt.gz files")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *dsn, *out); err != nil {
		fmt.Fprintln(os.Stderr, "capture:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, out string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// One statement per round trip: a multi-statement query is one implicit
	// transaction, and slots cannot be created in a transaction that wrote.
	for _, script := range []string{setupSQL, workloadSQL} {
		for _, stmt := range strings.SplitAfter(script, ";\n") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := conn.Exec(ctx, stmt).ReadAll(); err != nil {
				return fmt.Errorf("%q: %w", stmt, err)
			}
		}
	}
	if err := capture(ctx, dsn, "cap_v1", filepath.Join(out, "pgoutput_v1.txt.gz")); err != nil {
		return fmt.Errorf("slot cap_v1: %w", err)
	}
	_, err = conn.Exec(ctx, "select pg_drop_replication_slot('cap_v1')").ReadAll()
	return err
}

// capture reads slot until it has been idle for two seconds.
func capture(ctx context.Context, dsn, slot, path string) error {
	// 64kB is the smallest logical_decoding_work_mem: the bulk transactions
	// of the workload exceed it and are spilled to disk before they are sent.
	rconn, err := pgconn.Connect(ctx, dsn+"?replication=database&options=-c%20logical_decoding_work_mem%3D64kB")
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer rconn.Close(context.WithoutCancel(ctx))
	args := []string{"proto_version '1'", "publication_names 'cap'", "messages 'true'"}
	if err := pglogrepl.StartReplication(ctx, rconn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	w := bufio.NewWriter(zw)
	last := time.Now()
	for time.Since(last) < 2*time.Second {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		msg, err := rconn.ReceiveMessage(rctx)
		rcancel()
		if pgconn.Timeout(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			return fmt.Errorf("xlogdata: %w", err)
		}
		if len(xld.WALData) == 0 {
			return errors.New("empty XLogData")
		}
		last = time.Now()
		fmt.Fprintln(w, hex.EncodeToString(xld.WALData))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
