package query

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
)

func TestClassify(t *testing.T) {
	ex := func(code int32, name string) error {
		return fmt.Errorf("read documents: %w", &clickhouse.Exception{Code: code, Name: "DB::Exception", Message: name})
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, c := range []struct {
		name string
		err  error
		want ErrorClass
	}{
		{"a uuid compared with a bigint column", ex(43, "Illegal types of arguments (Int64, String) of function equals"), ClassInput},
		{"unparsable uuid", ex(376, "Cannot parse uuid"), ClassInput},
		{"type mismatch", ex(53, "Type mismatch"), ClassInput},
		{"number out of range", ex(321, "Value is out of range"), ClassInput},
		{"unparsable datetime", ex(41, "Cannot parse datetime"), ClassInput},
		{"a column missing", ex(47, "Missing columns: 'title'"), ClassInternal},
		{"syntax error (ours)", ex(62, "Syntax error"), ClassInternal},
		{"refused login", ex(516, "Authentication failed"), ClassInternal},
		{"too many queries", ex(202, "Too many simultaneous queries"), ClassUnavailable},
		{"memory limit", ex(241, "Memory limit exceeded"), ClassUnavailable},
		{"server shutting down", ex(394, "Query was cancelled"), ClassUnavailable},
		{"server-side timeout", ex(159, "Timeout exceeded"), ClassTimeout},
		{"connection refused", fmt.Errorf("read: %w", refused), ClassUnavailable},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), ClassUnavailable},
		{"server went away", fmt.Errorf("read: %w", io.EOF), ClassUnavailable},
		{"bad connection", driver.ErrBadConn, ClassUnavailable},
		{"no free connection", clickhouse.ErrAcquireConnTimeout, ClassUnavailable},
		{"first ping failed", fmt.Errorf("%w: ping: x", chstore.ErrNotReachable), ClassUnavailable},
		{"our deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), ClassTimeout},
		{"a scan into the wrong type", errors.New("clickhouse [ScanRow]: converting UInt64 to *string is unsupported"), ClassInternal},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s (%v): %s, want %s", c.name, c.err, got, c.want)
		}
	}
}
