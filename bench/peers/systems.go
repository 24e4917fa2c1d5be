package peers

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// system is one CDC system under test on one case: its own slot,
// publication and topics on the shared shard and Kafka.
type system struct {
	name      string // tributary, debezium, debezium-tuned
	kind      string // "tributary" or "debezium"
	table     string
	slot, pub string
	dataTopic string
	topics    []string // every topic it uses, deleted afterwards
	dir       string   // its config, offsets and logs
	tuning    map[string]string
	javaOpts  []string // added to --java-opts (debezium-xmx<size>: -Xmx<size>)
}

// systemNames are the systems `--systems` may name.
// Besides, debezium-xmx<size> (e.g. debezium-xmx256m) is Debezium's defaults
// with an explicit maximum heap, -Xmx<size>, instead of the JVM's default
// (1/4 of RAM), and -XX:+ExitOnOutOfMemoryError.
var systemNames = []string{"tributary", "debezium", "debezium-tuned", "debezium-lowlat", "debezium-xmx<size>"}

// xmxSize is the heap size of a debezium-xmx<size> system ("256m"), or "".
func xmxSize(name string) string {
	size, ok := strings.CutPrefix(name, "debezium-xmx")
	if !ok || len(size) < 2 || !strings.ContainsAny(size[len(size)-1:], "kmgKMG") {
		return ""
	}
	if _, err := strconv.Atoi(size[:len(size)-1]); err != nil {
		return ""
	}
	return size
}

// knownSystem tells whether --systems or --latency-systems may name it.
func knownSystem(name string) bool {
	return slices.Contains(systemNames[:len(systemNames)-1], name) || xmxSize(name) != ""
}

// debeziumTunedDefault is Debezium's tuned run (--debezium-tuned): 4x the
// default batch and queue (2048 and 8192), so that the sink waits for Kafka
// once per bigger batch, and poll.interval.ms 10 instead of 500 (how long
// the streaming loop sleeps when no replication message is pending and the
// queue waits for a batch to fill). docs/peers.md: it did not help.
const debeziumTunedDefault = "max.batch.size=8192,max.queue.size=32768,poll.interval.ms=10"

// debeziumLowlatDefault is the latency-tuned run (--debezium-lowlat):
// poll.interval.ms, Debezium's 500 ms wait for a batch to fill (and its
// sleep when no replication message is pending), down to 10 ms; batch and
// queue sizes stay at their defaults.
const debeziumLowlatDefault = "poll.interval.ms=10"

// parseTuning reads "k=v,k=v".
func parseTuning(flagName, s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", flagName, kv)
		}
		m[k] = v
	}
	return m, nil
}

func newSystem(name, table, workDir string, c config) (*system, error) {
	short := map[string]string{"tributary": "trib", "debezium": "dbz", "debezium-tuned": "dbzt",
		"debezium-lowlat": "dbzl"}[name]
	if size := xmxSize(name); size != "" {
		short = "dbzx" + strings.ToLower(size)
	}
	if short == "" {
		return nil, fmt.Errorf("unknown system %q (%s)", name, strings.Join(systemNames, ", "))
	}
	s := &system{name: name, table: table, slot: table + "_" + short, pub: table + "_" + short,
		dir: filepath.Join(workDir, name)}
	if name == "tributary" {
		s.kind = "tributary"
		s.dataTopic = s.slot + "." + table
		s.topics = []string{s.dataTopic, s.slot + "_state"}
	} else {
		s.kind = "debezium"
		s.dataTopic = s.slot + ".public." + table
		// Heartbeats (priming only) and logical decoding messages, which
		// Debezium captures by default: other clients of the shard (the
		// demo's readers) emit some while the bench runs.
		s.topics = []string{s.dataTopic, "__debezium-heartbeat." + s.slot, s.slot + ".message"}
		switch name {
		case "debezium-tuned":
			s.tuning = c.tuned
		case "debezium-lowlat":
			s.tuning = c.lowlat
		}
		if size := xmxSize(name); size != "" {
			// Out of heap, the JVM exits (the run fails) instead of limping on.
			s.javaOpts = []string{"-Xmx" + size, "-XX:+ExitOnOutOfMemoryError"}
		}
	}
	return s, os.MkdirAll(s.dir, 0o755)
}

// command is the argv and extra environment of one run of the system.
// prime is the first run, which only creates the slot and snapshots the
// still-empty table.
func (s *system) command(c config, prime bool) (argv, env []string, err error) {
	if s.kind == "tributary" {
		return s.tributaryCommand(c)
	}
	return s.debeziumCommand(c, prime)
}

// tributaryCommand runs cmd/cdc-reader with its defaults, except its metrics
// listener (off: the demo's readers may hold the default port).
func (s *system) tributaryCommand(c config) ([]string, []string, error) {
	tablesFile := filepath.Join(s.dir, "tables.json")
	js := fmt.Sprintf(`{"topic_prefix":%q,"tables":[{"name":%q,"id_column":"id","id_layout":"serial"}]}`, s.slot+".", s.table)
	if err := os.WriteFile(tablesFile, []byte(js), 0o644); err != nil {
		return nil, nil, err
	}
	argv := []string{c.cdcReader, "--shard", strconv.Itoa(c.shard), "--slot", s.slot, "--publication", s.pub,
		"--tables", tablesFile, "--kafka-brokers", c.brokers, "--partitions", strconv.Itoa(c.partitions),
		"--state-topic", s.slot + "_state", "--metrics-addr="}
	return argv, []string{"TRIBUTARY_PG_DSN=" + c.dsn}, nil
}

// debeziumCommand runs the embedded engine (bench/peers/debezium) with the
// connector's defaults but for what this comparison fixes: pgoutput, the
// JSON converter without schemas, our slot and publication, and a producer
// configured like the reader's franz-go client (acks=all, idempotent,
// snappy, 5 ms linger).
func (s *system) debeziumCommand(c config, prime bool) ([]string, []string, error) {
	u, err := url.Parse(c.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("shard DSN: %w", err)
	}
	p := map[string]string{
		"name":                         "peers-" + s.slot,
		"connector.class":              "io.debezium.connector.postgresql.PostgresConnector",
		"offset.storage":               "org.apache.kafka.connect.storage.FileOffsetBackingStore",
		"offset.storage.file.filename": filepath.Join(s.dir, "offsets.dat"),
		"database.hostname":            u.Hostname(),
		"database.port":                u.Port(),
		"database.user":                u.User.Username(),
		"database.dbname":              strings.TrimPrefix(u.Path, "/"),
		"topic.prefix":                 s.slot,
		"plugin.name":                  "pgoutput",
		"slot.name":                    s.slot,
		"publication.name":             s.pub,
		"publication.autocreate.mode":  "disabled",
		"table.include.list":           "public." + s.table,
		"snapshot.mode":                "initial",
		"converter.schemas.enable":     "false",
		"producer.bootstrap.servers":   c.brokers,
		"producer.acks":                "all",
		"producer.enable.idempotence":  "true",
		"producer.compression.type":    "snappy",
		"producer.linger.ms":           "5",
	}
	if pw, ok := u.User.Password(); ok {
		p["database.password"] = pw
	}
	if prime {
		// The priming run must store its position before it is stopped. The
		// snapshot of the empty table emits no record, hence no offset:
		// heartbeats (priming only) carry one, flushed every 500 ms.
		p["offset.flush.interval.ms"] = "500"
		p["heartbeat.interval.ms"] = "100"
	}
	for k, v := range s.tuning {
		p[k] = v
	}
	propsFile := filepath.Join(s.dir, "debezium.properties")
	if err := os.WriteFile(propsFile, properties(p), 0o600); err != nil {
		return nil, nil, err
	}
	argv := append([]string{c.java}, c.javaOpts...)
	argv = append(argv, s.javaOpts...)
	return append(argv, "-jar", c.jar, propsFile), nil, nil
}

func properties(p map[string]string) []byte {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, strings.ReplaceAll(p[k], `\`, `\\`))
	}
	return b.Bytes()
}

// isChange tells a row change from the reader's control records
// (watermarks, to every partition every 500 ms). Every Debezium record on
// the data topic is a change (heartbeats are off by default).
func (s *system) isChange(value []byte) bool {
	if value == nil {
		return false
	}
	return s.kind != "tributary" || !bytes.Contains(value, []byte(`"kind":"watermark"`))
}

// primed checks that a priming run stored the position the measured run
// resumes from: without it, Debezium would take an initial snapshot of the
// now full table instead of streaming the workload.
func (s *system) primed() error {
	if s.kind != "debezium" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "offsets.dat"))
	if err != nil || !bytes.Contains(b, []byte("lsn")) {
		return fmt.Errorf("%s: priming stored no offset (%v); log %s", s.name, err, filepath.Join(s.dir, "prime.log"))
	}
	return nil
}

// resumed checks that the measured run streamed from the primed position.
func (s *system) resumed(p *process) error {
	if s.kind == "debezium" && p.lines.has("No previous offset") {
		return fmt.Errorf("%s did not resume from its primed offset (it snapshotted); log %s", s.name, p.logPath)
	}
	return nil
}
