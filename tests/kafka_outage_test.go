package tests

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mrand "math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// ownKafka is a single-node Apache Kafka (KRaft, broker and controller in
// one JVM) that a test starts for itself from the jars deploy/local/install.sh
// downloaded, configured the way deploy/local/stack.d/kafka.sh configures the
// shared one, on ports of its own and with its data under t.TempDir(). A test
// may stop, kill and restart it; the shared broker is never touched.
//
// One difference from the shared broker: log.message.timestamp.type is
// LogAppendTime, so every record carries the broker's clock at append time
// and a test can tell records Kafka held before an outage from those it
// took after.
type ownKafka struct {
	t        *testing.T
	jars     string
	dir      string
	port     int
	ctrlPort int
	// Set by startKafkaCluster for a node of a cluster (kafka_cluster_test.go);
	// zero for a single node.
	cluster *clusterNode

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	starts int
}

// kafkaJarsDir returns the jar cache install.sh fills, or skips the test
// (fails under TRIBUTARY_REQUIRE_STACK=1) when it or java is missing.
func kafkaJarsDir(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + " (run deploy/local/install.sh)"
		if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
			t.Fatal("this test starts its own Kafka broker: " + msg)
		}
		t.Skip("this test starts its own Kafka broker: " + msg)
	}
	version, err := kafkaVersion("../deploy/local/lib.sh")
	if err != nil {
		missing("cannot read KAFKA_VERSION: %v", err)
	}
	dir := os.Getenv("TRIBUTARY_KAFKA_JARS")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "tributary", "kafka-"+version)
	}
	// install.sh writes the manifest last: without it the copy is incomplete.
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		missing("Kafka %s jars absent or incomplete in %s", version, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "kafka_2.13-"+version+".jar")); err != nil {
		missing("Kafka %s jars absent or incomplete in %s", version, dir)
	}
	if _, err := exec.LookPath("java"); err != nil {
		missing("java not found")
	}
	return dir
}

// kafkaVersion reads KAFKA_VERSION from deploy/local/lib.sh.
func kafkaVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "KAFKA_VERSION="); ok {
			return strings.Trim(v, `"'`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no KAFKA_VERSION line in " + path)
}

// freePort asks the kernel for an unused port. The stack's ports are
// reserved (stack.sh reserve_ports), so it never hands one of them out.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startOwnKafka formats a data directory and starts the broker; it is
// killed at cleanup, which is registered first so that it runs after the
// cleanups of anything built on the broker later (LIFO).
func startOwnKafka(t *testing.T) *ownKafka {
	t.Helper()
	k := &ownKafka{t: t, jars: kafkaJarsDir(t), dir: t.TempDir(), port: freePort(t), ctrlPort: freePort(t)}
	t.Cleanup(k.shutdown)
	if err := k.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if err := k.format(); err != nil {
		t.Fatal(err)
	}
	k.start()
	return k
}

// addr is the broker's bootstrap address.
func (k *ownKafka) addr() string { return "127.0.0.1:" + strconv.Itoa(k.port) }

func (k *ownKafka) writeConfig() error {
	for _, d := range []string{"data", "logs"} {
		if err := os.MkdirAll(filepath.Join(k.dir, d), 0o755); err != nil {
			return err
		}
	}
	host := "127.0.0.1"
	nodeID, quorum := 1, fmt.Sprintf("controller.quorum.bootstrap.servers=%s:%d", host, k.ctrlPort)
	rf, minISR := 1, 1
	if c := k.cluster; c != nil {
		nodeID, quorum, rf, minISR = c.id, "controller.quorum.voters="+c.voters, c.rf, c.minISR
	}
	props := fmt.Sprintf(`# Written by tests/kafka_outage_test.go, after deploy/local/stack.d/kafka.sh.
process.roles=broker,controller
node.id=%[5]d
%[6]s
listeners=PLAINTEXT://%[1]s:%[2]d,CONTROLLER://%[1]s:%[3]d
advertised.listeners=PLAINTEXT://%[1]s:%[2]d,CONTROLLER://%[1]s:%[3]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%[4]s
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=%[7]d
transaction.state.log.replication.factor=%[7]d
transaction.state.log.min.isr=%[8]d
share.coordinator.state.topic.replication.factor=%[7]d
share.coordinator.state.topic.min.isr=%[8]d
default.replication.factor=%[7]d
min.insync.replicas=%[8]d
unclean.leader.election.enable=false
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# The test tells records appended before an outage from later ones by this.
log.message.timestamp.type=LogAppendTime
`, host, k.port, k.ctrlPort, filepath.Join(k.dir, "data"), nodeID, quorum, rf, minISR)
	if err := os.WriteFile(filepath.Join(k.dir, "server.properties"), []byte(props), 0o644); err != nil {
		return err
	}
	log4j := fmt.Sprintf(`appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
`, filepath.Join(k.dir, "logs", "server.log"))
	return os.WriteFile(filepath.Join(k.dir, "log4j2.properties"), []byte(log4j), 0o644)
}

// format runs the storage tool once, as stack.sh does (kafka_tool).
func (k *ownKafka) format() error {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck // never fails
	cid, mode := base64.RawURLEncoding.EncodeToString(b), "--standalone"
	if k.cluster != nil {
		// Every node of a cluster has its id; the static voters need no
		// mode flag (the tool refuses --standalone with them).
		cid, mode = k.cluster.clusterID, ""
	}
	args := []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m",
		"-Dlog4j2.configurationFile=" + filepath.Join(k.dir, "log4j2.properties"), "-cp", k.jars + "/*",
		"kafka.tools.StorageTool", "format", "-t", cid, "-c", filepath.Join(k.dir, "server.properties")}
	if mode != "" {
		args = append(args, mode)
	}
	cmd := exec.Command("java", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kafka storage format: %v\n%s", err, out)
	}
	return nil
}

// start launches the broker on the existing data directory and waits until
// it answers metadata requests.
func (k *ownKafka) start() {
	k.t.Helper()
	k.launch()
	if err := k.waitReady(90 * time.Second); err != nil {
		k.t.Fatalf("own kafka on %s: %v\n%s", k.addr(), err, k.logTail())
	}
}

// launch starts the broker's JVM and returns.
func (k *ownKafka) launch() {
	k.t.Helper()
	stdout, err := os.OpenFile(filepath.Join(k.dir, "logs", "stdout.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		k.t.Fatal(err)
	}
	// The stack's JVM flags, plus C1 only: a test broker starts faster and
	// costs less CPU on a shared machine.
	cmd := exec.Command("java", "-Xmx384m", "-Xms64m", "-XX:TieredStopAtLevel=1", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+filepath.Join(k.dir, "log4j2.properties"), "-cp", k.jars+"/*",
		"kafka.Kafka", filepath.Join(k.dir, "server.properties"))
	cmd.Stdout, cmd.Stderr = stdout, stdout
	// Its own process group (no terminal signals), and killed with the
	// test binary should that die without running cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		stdout.Close()
		k.t.Fatalf("start kafka: %v", err)
	}
	k.cmd, k.exited = cmd, make(chan struct{})
	k.starts++
	go func(exited chan struct{}) {
		cmd.Wait() //nolint:errcheck // exit status is irrelevant: the test kills it
		stdout.Close()
		close(exited)
	}(k.exited)
}

// waitReady polls until the broker lists itself (and in a cluster, every
// node) in a metadata answer.
func (k *ownKafka) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-k.exited:
			return errors.New("the broker exited while starting")
		default:
		}
		// A client per attempt: one client keeps answering from the
		// metadata it cached, which in a cluster may predate a broker.
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr()), kgo.RetryTimeout(2*time.Second))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		cancel()
		cl.Close()
		want := 1
		if k.cluster != nil {
			want = k.cluster.nodes
		}
		if err == nil && len(md.Brokers) == want && md.Controller >= 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				return fmt.Errorf("not ready after %s: %d of %d brokers listed, controller %d", within, len(md.Brokers), want, md.Controller)
			}
			return fmt.Errorf("not ready after %s: %v", within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// signal sends sig to the running broker.
func (k *ownKafka) signal(sig syscall.Signal) {
	k.t.Helper()
	if err := k.cmd.Process.Signal(sig); err != nil {
		k.t.Fatalf("signal %v to own kafka: %v", sig, err)
	}
}

// kill SIGKILLs the broker and waits until it is gone.
func (k *ownKafka) kill() {
	k.t.Helper()
	k.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // may be gone already
	select {
	case <-k.exited:
	case <-time.After(30 * time.Second):
		k.t.Fatal("own kafka did not die within 30 s of SIGKILL")
	}
}

// shutdown kills the broker whatever state it is in (a stopped process
// dies of SIGKILL too; SIGCONT is sent anyway) and waits for it.
func (k *ownKafka) shutdown() {
	if k.cmd == nil {
		return
	}
	select {
	case <-k.exited:
		return
	default:
	}
	k.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck
	k.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck
	select {
	case <-k.exited:
	case <-time.After(30 * time.Second):
		k.t.Errorf("own kafka (pid %d) did not exit after SIGKILL", k.cmd.Process.Pid)
	}
}

// logTail is the end of the broker's logs, for failure messages.
func (k *ownKafka) logTail() string {
	var b strings.Builder
	for _, f := range []string{"stdout.log", "server.log"} {
		data, err := os.ReadFile(filepath.Join(k.dir, "logs", f))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Kafka outage tests: the pipeline runs against its own broker,
// which goes away for about 30 s while two shards keep taking writes. The
// shared broker is never touched.

// TestKafkaOutagePartition: the broker is SIGSTOPped for 30 s (like a
// network partition: connections stay open, nothing answers) and resumed.
func TestKafkaOutagePartition(t *testing.T) { t.Parallel(); kafkaOutage(t, false) }

// TestKafkaOutageCrash: the broker is SIGKILLed and restarted on the same
// data directory once it has been gone for about 30 s (a crash).
func TestKafkaOutageCrash(t *testing.T) { t.Parallel(); kafkaOutage(t, true) }

// kafkaOutage asserts, after the broker is back:
//   - ClickHouse equals the shards exactly (nothing lost, no deleted row
//     back, no live (id, shard) stored twice);
//   - neither reader nor the loader returned (they ride the outage out);
//   - the slots were never confirmed past what Kafka held: every change
//     whose commit lies below the highest confirmed_flush_lsn seen during
//     the outage has a copy that the broker appended before the outage
//     began (LogAppendTime), so a crash of the reader at any moment of the
//     outage would lose nothing;
//   - the outage held changes back (some reached Kafka only after it), and
//     the slots moved on afterwards.
func kafkaOutage(t *testing.T, crash bool) {
	const outage = 30 * time.Second
	t0 := time.Now()
	k := startOwnKafka(t)
	t.Logf("own kafka ready on %s in %s", k.addr(), time.Since(t0).Round(100*time.Millisecond))
	p := newPipeline(t, []int{0, 1}, []string{k.addr()})
	// Runs before the pipeline's cleanup (which needs the broker to delete
	// topics) should the test stop during the outage.
	t.Cleanup(func() {
		select {
		case <-k.exited:
		default:
			k.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := p.table()

	writes, stopWrites := p.startSteadyWrites(ctx, tbl)
	defer stopWrites()
	// A reader creates its slot when it starts; the first rows in
	// ClickHouse may all come from the other shard.
	p.waitFor(ctx, 30*time.Second, "every shard's slot confirmed", func() bool {
		pos := p.slotPositions(ctx)
		for _, s := range p.shards {
			if pos[s] == 0 {
				return false
			}
		}
		return true
	})
	before := p.slotPositions(ctx)

	// The outage. The slots are sampled all along.
	stopAt := time.Now()
	if crash {
		k.kill()
	} else {
		k.signal(syscall.SIGSTOP)
	}
	writesAtStop := writes.Load()
	outageMax := map[int]envelope.LSN{}
	firstSecond := map[int]envelope.LSN{} // after in-flight acks settled
	restartAt := stopAt.Add(outage)
	if crash {
		restartAt = stopAt.Add(outage - 12*time.Second) // the JVM takes ~10-15 s to come back
	}
	for time.Now().Before(restartAt) {
		for s, pos := range p.slotPositions(ctx) {
			outageMax[s] = max(outageMax[s], pos)
			if time.Since(stopAt) < time.Second {
				firstSecond[s] = max(firstSecond[s], pos)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if crash {
		k.start()
	} else {
		k.signal(syscall.SIGCONT)
	}
	backAt := time.Now()
	t.Logf("broker unavailable for %s (crash %v); %d writes during it; slots before %v, during (max) %v",
		backAt.Sub(stopAt).Round(100*time.Millisecond), crash, writes.Load()-writesAtStop, before, outageMax)
	if err := p.failed(); err != nil {
		t.Errorf("a component returned during the outage: %v", err)
	}

	time.Sleep(3 * time.Second) // writes go on after the broker is back
	stopWrites()

	convStart := time.Now()
	var diff string
	for time.Since(convStart) < 60*time.Second {
		if diff = p.compare(ctx, tbl); diff == "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shards after the outage:\n%s", diff)
	}
	t.Logf("converged %s after the writes stopped (%d writes in all)", time.Since(convStart).Round(100*time.Millisecond), writes.Load())
	if d := p.chDuplicates(ctx); d != 0 {
		t.Errorf("%d live (id, shard) pairs stored more than once", d)
	}
	if err := p.failed(); err != nil {
		t.Fatalf("a component returned instead of riding out the outage: %v", err)
	}
	after := p.slotPositions(ctx)
	for _, s := range p.shards {
		if after[s] <= outageMax[s] {
			t.Errorf("shard %d: slot at %s after the outage, not past %s where it was during it", s, after[s], outageMax[s])
		}
		if outageMax[s] > firstSecond[s] {
			t.Logf("shard %d: the slot moved from %s to %s during the outage (after its first second)", s, firstSecond[s], outageMax[s])
		}
	}

	// What the broker held when the outage began bounds what the readers
	// may have confirmed during it.
	recs, err := readTopic(ctx, []string{k.addr()}, p.topic())
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		shard int
		lsn   envelope.LSN
		seq   uint32
		op    envelope.Op
		id    string
	}
	held := map[change]bool{} // a copy was appended before the outage
	var changes []change
	commits := map[change]envelope.LSN{}
	copies := 0
	boundary := stopAt.Add(500 * time.Millisecond) // the signal lands within it; recovery is >= 10 s later
	for _, r := range recs {
		ev, err := envelope.Decode(r.Value)
		if err != nil {
			t.Fatalf("undecodable record at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if ev.Kind != envelope.KindChange {
			continue
		}
		copies++
		c := change{ev.Shard, ev.LSN, ev.Seq, ev.Op, ev.ID}
		if _, seen := commits[c]; !seen {
			changes = append(changes, c)
			commits[c] = ev.CommitLSN
		}
		if r.Timestamp.Before(boundary) {
			held[c] = true
		}
	}
	late, unbacked := 0, 0
	for _, c := range changes {
		if !held[c] {
			late++
		}
		if commits[c] < outageMax[c.shard] && !held[c] {
			if unbacked < 5 {
				t.Errorf("shard %d: the slot was confirmed to %s during the outage, but the change %+v (commit %s) reached Kafka only after it",
					c.shard, outageMax[c.shard], c, commits[c])
			}
			unbacked++
		}
	}
	t.Logf("%d change records, %d distinct changes (the rest are copies), %d reached Kafka only after the outage began, %d confirmed without being held",
		copies, len(changes), late, unbacked)
	if late == 0 {
		t.Errorf("no change was held back by the outage: the test did not test an outage")
	}
}

// chLive is the number of live rows in the pipeline's ClickHouse table (0
// while the loader has not created it yet).
func (p *pipeline) chLive(ctx context.Context) int64 {
	var n uint64
	err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, p.table())).Scan(&n)
	if err != nil {
		return 0
	}
	return int64(n)
}

// slotPositions returns the confirmed_flush_lsn of each shard's slot; a
// shard whose slot does not exist yet is left out.
func (p *pipeline) slotPositions(ctx context.Context) map[int]envelope.LSN {
	p.t.Helper()
	out := map[int]envelope.LSN{}
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			p.t.Fatalf("connect shard %d: %v", s, err)
		}
		var pos *string
		err = conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
			fmt.Sprintf("e2e_%s_%d", p.suffix, s)).Scan(&pos)
		conn.Close(ctx)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			p.t.Fatalf("slot of shard %d: %v", s, err)
		}
		if pos != nil {
			if out[s], err = envelope.ParseLSN(*pos); err != nil {
				p.t.Fatal(err)
			}
		}
	}
	return out
}

// readTopic returns every record of topic, from the start to the end
// offsets it had when called.
func readTopic(ctx context.Context, brokers []string, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	want := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			return nil, fmt.Errorf("read %s: %w (partitions left: %v)", topic, rctx.Err(), left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok {
				out = append(out, r)
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			}
		})
	}
	return out, nil
}

// startSteadyWrites runs steadyWrites on every shard of the pipeline until
// the returned stop (idempotent), which waits for them and reports their
// errors; it returns once the first rows are in ClickHouse.
func (p *pipeline) startSteadyWrites(ctx context.Context, tbl string) (*atomic.Int64, func()) {
	p.t.Helper()
	wctx, wcancel := context.WithCancel(ctx)
	writes := new(atomic.Int64)
	var wg sync.WaitGroup
	var writeErrs sync.Map
	for _, s := range p.shards {
		wg.Add(1)
		go func(shard int) {
			defer wg.Done()
			if err := steadyWrites(wctx, p.stack.ShardDSNs[shard], tbl, shard, writes); err != nil && wctx.Err() == nil {
				writeErrs.Store(shard, err)
			}
		}(s)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			wcancel()
			wg.Wait()
			writeErrs.Range(func(k, v any) bool { p.t.Errorf("writes on shard %v: %v", k, v); return true })
		})
	}
	p.waitFor(ctx, 30*time.Second, "the first rows in ClickHouse", func() bool { return p.chLive(ctx) > 0 })
	time.Sleep(time.Second)
	return writes, stop
}

// steadyWrites inserts (some TOASTed bodies, some 20-row transactions),
// updates and deletes on one shard, a few hundred changes a second, until
// ctx ends; n counts the statements that committed.
func steadyWrites(ctx context.Context, dsn, tbl string, shard int, n *atomic.Int64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	q := pgx.Identifier{tbl}.Sanitize()
	pick := "(SELECT id FROM " + q + " ORDER BY random() LIMIT 1)"
	for ctx.Err() == nil {
		var err error
		switch op := mrand.IntN(20); {
		case op < 9:
			body := "small"
			if mrand.IntN(5) == 0 {
				body = strings.Repeat(strconv.Itoa(mrand.IntN(10)), 3000+mrand.IntN(3000))
			}
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title, body) VALUES ($1, $2, $3)",
				shard*100+mrand.IntN(10), "t"+strconv.Itoa(mrand.IntN(1e6)), body)
		case op < 14:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET title = $1 WHERE id = "+pick, "u"+strconv.Itoa(mrand.IntN(1e6)))
		case op < 16:
			_, err = conn.Exec(ctx, "DELETE FROM "+q+" WHERE id = "+pick)
		case op < 17:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET body = $1 WHERE id = "+pick, strings.Repeat("b", 2500+mrand.IntN(2000)))
		default:
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title, body) SELECT $1, 'batch', 'x' FROM generate_series(1, 20)", shard)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n.Add(1)
		time.Sleep(3 * time.Millisecond)
	}
	return nil
}
