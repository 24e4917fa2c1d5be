package query

// Whose problem a failed query is. The API answers 503 ("retry later")
// only when ClickHouse is unreachable or overloaded; a query that the
// request's values made invalid (a value its column's type cannot take)
// is the caller's, a 400; and a query that is wrong whatever the caller
// sends (a column missing after a schema change, a bug in our SQL, a
// refused login) is a 500, which no retry fixes. ClickHouse says which by
// its exception code (ClickHouse's numbered error codes; the ones used here are
// the same in 18.16 and current ClickHouse).

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
)

// ErrorClass is whose problem a failed query is.
type ErrorClass int

// Error classes, from Classify.
const (
	// ClassInternal: the query is wrong whatever the caller sends; retrying
	// does not help. Anything not recognised as one of the others.
	ClassInternal ErrorClass = iota
	// ClassUnavailable: ClickHouse is down, unreachable or overloaded;
	// the same request may succeed later.
	ClassUnavailable
	// ClassTimeout: the query ran out of time (ours or ClickHouse's).
	ClassTimeout
	// ClassInput: a value of the request does not fit the column it is
	// compared with (wrong type, unparsable, out of range).
	ClassInput
)

// String names the class (for logs).
func (c ErrorClass) String() string {
	switch c {
	case ClassUnavailable:
		return "unavailable"
	case ClassTimeout:
		return "timeout"
	case ClassInput:
		return "input"
	}
	return "internal"
}

// Exception codes by class. Codes not listed are ClassInternal.
var exceptionClasses = map[int32]ErrorClass{
	// A value the request carried does not fit its column or function.
	6:   ClassInput, // CANNOT_PARSE_TEXT
	25:  ClassInput, // CANNOT_PARSE_ESCAPE_SEQUENCE
	26:  ClassInput, // CANNOT_PARSE_QUOTED_STRING
	27:  ClassInput, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
	38:  ClassInput, // CANNOT_PARSE_DATE
	41:  ClassInput, // CANNOT_PARSE_DATETIME
	43:  ClassInput, // ILLEGAL_TYPE_OF_ARGUMENT (a uuid compared with a bigint column)
	53:  ClassInput, // TYPE_MISMATCH
	69:  ClassInput, // ARGUMENT_OUT_OF_BOUND
	70:  ClassInput, // CANNOT_CONVERT_TYPE
	72:  ClassInput, // CANNOT_PARSE_NUMBER
	131: ClassInput, // TOO_LARGE_STRING_SIZE
	321: ClassInput, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
	376: ClassInput, // CANNOT_PARSE_UUID
	386: ClassInput, // NO_COMMON_TYPE
	407: ClassInput, // DECIMAL_OVERFLOW
	// The server cannot take the query now.
	202: ClassUnavailable, // TOO_MANY_SIMULTANEOUS_QUERIES
	203: ClassUnavailable, // NO_FREE_CONNECTION
	210: ClassUnavailable, // NETWORK_ERROR
	236: ClassUnavailable, // ABORTED
	241: ClassUnavailable, // MEMORY_LIMIT_EXCEEDED
	242: ClassUnavailable, // TABLE_IS_READ_ONLY
	279: ClassUnavailable, // ALL_CONNECTION_TRIES_FAILED
	285: ClassUnavailable, // TOO_FEW_LIVE_REPLICAS
	394: ClassUnavailable, // QUERY_WAS_CANCELLED (server shutting down)
	425: ClassUnavailable, // SYSTEM_ERROR
	439: ClassUnavailable, // CANNOT_SCHEDULE_TASK
	999: ClassUnavailable, // KEEPER_EXCEPTION
	// Out of time.
	159: ClassTimeout, // TIMEOUT_EXCEEDED
	160: ClassTimeout, // TOO_SLOW
	209: ClassTimeout, // SOCKET_TIMEOUT
}

// Classify says whose problem err, from a query, is. A ClickHouse
// exception is classed by its code; a failure to reach or talk to the
// server (refused, reset, closed connection, no free connection, a first
// ping that failed) is ClassUnavailable; a deadline is ClassTimeout;
// anything else (a scan into the wrong type, say) is ClassInternal.
func Classify(err error) ErrorClass {
	var ex *clickhouse.Exception
	var netErr net.Error
	switch {
	case err == nil:
		return ClassInternal
	case errors.As(err, &ex):
		if c, ok := exceptionClasses[ex.Code]; ok {
			return c
		}
		return ClassInternal
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout
	case errors.As(err, &netErr),
		errors.Is(err, chstore.ErrNotReachable),
		errors.Is(err, clickhouse.ErrAcquireConnTimeout), errors.Is(err, clickhouse.ErrConnectionClosed),
		errors.Is(err, driver.ErrBadConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassUnavailable
	}
	return ClassInternal
}

// Exception returns ClickHouse's exception in err, if there is one.
func Exception(err error) (*clickhouse.Exception, bool) {
	var ex *clickhouse.Exception
	ok := errors.As(err, &ex)
	return ex, ok
}
