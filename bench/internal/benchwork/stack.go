package benchwork

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/tributary/tributary/internal/fleet"
)

// ShardDSNs reads the fleet file's shards and their DSNs, by shard number.
func ShardDSNs(path string) (map[int]string, error) {
	if path == "" {
		return nil, errors.New("--fleet (or $TRIBUTARY_FLEET) is required: the fleet file (set -a; . .stack/stack.env; set +a)")
	}
	f, err := fleet.Load(path)
	if err != nil {
		return nil, err
	}
	eps, err := f.Resolve(os.Getenv)
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(eps))
	for _, e := range eps {
		out[e.Number] = e.DSN
	}
	return out, nil
}

// Demo is where deploy/local/demo.sh's processes listen on a stack:
// the API on 8080, the loader's metrics on 9101 and reader n's on 9110+n,
// each plus the stack's port offset ($TRIBUTARY_PORT_OFFSET, which
// stack.env carries; 0 when unset).
type Demo struct {
	APIURL        string // http://127.0.0.1:port
	LoaderMetrics string // host:port
	offset        int
}

// DemoOf is the demo of the stack the environment describes. A
// $TRIBUTARY_PORT_OFFSET that is not a number is an error naming it.
func DemoOf(getenv func(string) string) (Demo, error) {
	off := 0
	if s := getenv("TRIBUTARY_PORT_OFFSET"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Demo{}, fmt.Errorf("$TRIBUTARY_PORT_OFFSET=%q is not a port offset (a number >= 0, as stack.env writes it)", s)
		}
		off = n
	}
	return Demo{APIURL: "http://127.0.0.1:" + strconv.Itoa(8080+off), LoaderMetrics: "127.0.0.1:" + strconv.Itoa(9101+off), offset: off}, nil
}

// ReaderMetrics lists the readers' metrics addresses (host:port) for the
// shards of dsns, in shard order.
func (d Demo) ReaderMetrics(dsns map[int]string) []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(dsns)) {
		out = append(out, "127.0.0.1:"+strconv.Itoa(9110+d.offset+n))
	}
	return out
}
