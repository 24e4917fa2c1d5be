package chstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestIsServerError(t *testing.T) {
	zk := fmt.Errorf("poll: %w", &clickhouse.Exception{Code: 999, Message: "All connection tries failed while connecting to ZooKeeper"})
	other := &clickhouse.Exception{Code: 60, Message: "Table does not exist"}
	refused := errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	for _, c := range []struct {
		name  string
		err   error
		codes []int32
		want  bool
	}{
		{"an exception, any code", other, nil, true},
		{"a dial error", refused, nil, false},
		{"ZooKeeper lost, wrapped", zk, zooKeeperCodes, true},
		{"another exception is not ZooKeeper", other, zooKeeperCodes, false},
		{"a dial error is not ZooKeeper", refused, zooKeeperCodes, false},
	} {
		if got := isServerError(c.err, c.codes...); got != c.want {
			t.Errorf("%s: isServerError(%v, %v) = %v, want %v", c.name, c.err, c.codes, got, c.want)
		}
	}
}
