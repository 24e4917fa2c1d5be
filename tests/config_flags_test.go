package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The flag table of docs/configuration.md is generated from each binary's --help, between
// these two lines.
const (
	flagsBegin = "<!-- flags: generated from each binary's --help by tests/config_flags_test.go; TRIBUTARY_UPDATE_DOCS=1 go test ./tests -run TestConfigFlagTable rewrites it -->"
	flagsEnd   = "<!-- flags: end -->"
)

// documentedBinaries are the binaries (and bench's subcommands, and
// tributaryctl's actions, each with flags of its own) whose flags
// docs/configuration.md lists: all of them.
var documentedBinaries = []string{"cdc-reader", "loader", "api", "verify", "loadgen", "preflight", "embedded-kafka",
	"tributaryctl status", "tributaryctl pause", "tributaryctl resume", "tributaryctl dlq list", "tributaryctl dlq replay",
	"tributaryctl resnapshot", "tributaryctl teardown", "chaos",
	"bench loader", "bench reader", "bench api", "bench latency", "bench sustain", "bench peers"}

// sourceDir is where a documented binary's (or subcommand's) flags are
// defined: cmd/<binary>, or bench/<subcommand> for the bench command.
func sourceDir(name string) string {
	parts := strings.Fields(name)
	if parts[0] == "bench" && len(parts) > 1 {
		return filepath.Join("../bench", parts[1])
	}
	return filepath.Join("../cmd", parts[0])
}

// helpFlag is one flag as --help prints it.
type helpFlag struct {
	name, typ, usage, env, def string
}

var (
	flagLine = regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)
	envRe    = regexp.MustCompile(`\s*\[\$?([A-Z][A-Z0-9_]*)(=[^\]]*)?\]`)
	defRe    = regexp.MustCompile(`\s*\(default (.*)\)$`)
)

// parseHelp reads the flags of a flag.PrintDefaults listing.
func parseHelp(help string) []helpFlag {
	var out []helpFlag
	lines := strings.Split(help, "\n")
	for i := 0; i < len(lines); i++ {
		m := flagLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := helpFlag{name: m[1], typ: m[2]}
		var usage []string
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			i++
			usage = append(usage, strings.TrimSpace(lines[i]))
		}
		u := strings.Join(usage, " ")
		if d := defRe.FindStringSubmatch(u); d != nil {
			f.def = strings.Trim(d[1], `"`)
			u = strings.TrimSpace(u[:len(u)-len(d[0])])
		}
		if e := envRe.FindStringSubmatch(u); e != nil {
			f.env = e[1]
			u = strings.TrimSpace(strings.Replace(u, e[0], "", 1))
		}
		f.usage = u
		out = append(out, f)
	}
	return out
}

// flagTable renders the flags of every documented binary as a Markdown
// table.
func flagTable(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/...", "../bench").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Defaults printed by --help come from the environment when it sets
	// them: run with none of ours.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRIBUTARY_") {
			env = append(env, kv)
		}
	}
	// A cell escapes "|" (a column break) and "<" (an HTML tag to a
	// Markdown renderer: "tributary_shard_<N>" would lose its "<N>").
	cell := strings.NewReplacer("|", `\|`, "<", "&lt;").Replace
	var b strings.Builder
	b.WriteString("| binary | flag | env | default | what |\n|---|---|---|---|---|\n")
	for _, name := range documentedBinaries {
		parts := strings.Fields(name)
		cmd := exec.Command(filepath.Join(bin, parts[0]), append(parts[1:], "--help")...)
		cmd.Env = env
		help, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", name, err, help)
		}
		flags := parseHelp(string(help))
		if len(flags) == 0 {
			t.Fatalf("%s --help lists no flags:\n%s", name, help)
		}
		for i, f := range flags {
			binCell := ""
			if i == 0 {
				binCell = name
			}
			flag := "`--" + f.name + "`"
			if f.typ != "" {
				flag += " " + f.typ
			}
			envCell, defCell := "", ""
			if f.env != "" {
				envCell = "`" + f.env + "`"
			}
			if f.def != "" {
				defCell = "`" + cell(f.def) + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", binCell, flag, envCell, defCell, cell(f.usage))
		}
	}
	return b.String()
}

// TestConfigFlagTable: the configuration table of docs/configuration.md lists every flag
// of every binary, with its environment variable and default, exactly as
// --help says, so that the two cannot drift. TRIBUTARY_UPDATE_DOCS=1
// rewrites the table.
func TestConfigFlagTable(t *testing.T) {
	readme, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	// Every binary under cmd/ is documented: a new one cannot be forgotten.
	dirs, err := os.ReadDir("../cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !slices.ContainsFunc(documentedBinaries, func(b string) bool { return strings.Fields(b)[0] == d.Name() }) {
			t.Errorf("cmd/%s is not in documentedBinaries: its flags would be missing from docs/configuration.md", d.Name())
		}
	}
	// So is every subcommand of bench (a package bench/<name>).
	subs, err := os.ReadDir("../bench")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range subs {
		if d.IsDir() && d.Name() != "internal" && !slices.Contains(documentedBinaries, "bench "+d.Name()) {
			t.Errorf("bench/%s is not in documentedBinaries: its flags would be missing from docs/configuration.md", d.Name())
		}
	}
	begin, end := strings.Index(text, flagsBegin), strings.Index(text, flagsEnd)
	if begin < 0 || end < begin {
		t.Fatalf("docs/configuration.md has no generated flag table (between %q and %q)", flagsBegin, flagsEnd)
	}
	// Secrets are environment only: each one a documented binary reads
	// must be named in docs/configuration.md too.
	secret := regexp.MustCompile(`\.Secret\([^,]+,\s*"([A-Z0-9_]+)"\)`)
	for _, name := range documentedBinaries {
		files, _ := filepath.Glob(filepath.Join(sourceDir(name), "*.go"))
		if len(files) == 0 {
			t.Fatalf("%s: no sources in %s", name, sourceDir(name))
		}
		// The flag groups the binaries share register secrets too.
		files = append(files, "../internal/chstore/flags.go", "../internal/kafkaconn/kafkaconn.go")
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range secret.FindAllStringSubmatch(string(src), -1) {
				if !strings.Contains(text, "`"+m[1]+"`") {
					t.Errorf("%s reads the secret $%s, which docs/configuration.md does not name", name, m[1])
				}
			}
		}
	}
	want := flagTable(t)
	got := text[begin+len(flagsBegin)+1 : end]
	if got == want {
		return
	}
	if os.Getenv("TRIBUTARY_UPDATE_DOCS") == "1" {
		text = text[:begin+len(flagsBegin)+1] + want + text[end:]
		if err := os.WriteFile("../docs/configuration.md", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("docs/configuration.md flag table rewritten")
		return
	}
	gotRows, wantRows := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, r := range wantRows {
		if !containsLine(gotRows, r) {
			t.Errorf("docs/configuration.md lacks (or has another version of) the row:\n%s", r)
		}
	}
	for _, r := range gotRows {
		if !containsLine(wantRows, r) {
			t.Errorf("docs/configuration.md has a row --help does not print:\n%s", r)
		}
	}
	t.Log("regenerate with: TRIBUTARY_UPDATE_DOCS=1 go test ./tests -run TestConfigFlagTable")
}

func containsLine(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

// TestParseHelp: the parser reads flag.PrintDefaults' layout, with the
// environment variable in either bracket form and defaults quoted or not.
func TestParseHelp(t *testing.T) {
	help := "Flags:\n" +
		"  -batch-wait duration\n    \tmaximum wait [$TRIBUTARY_LOADER_BATCH_WAIT] (default 200ms)\n" +
		"  -require-auth\n    \trefuse to start without tokens [$TRIBUTARY_API_REQUIRE_AUTH]\n" +
		"  -sync\n    \tfsync every batch [TRIBUTARY_EMBEDDED_KAFKA_SYNC=true]\n" +
		"  -log-format string\n    \tlog format: text or json [$TRIBUTARY_LOG_FORMAT] (default \"text\")\n"
	got := parseHelp(help)
	want := []helpFlag{
		{"batch-wait", "duration", "maximum wait", "TRIBUTARY_LOADER_BATCH_WAIT", "200ms"},
		{"require-auth", "", "refuse to start without tokens", "TRIBUTARY_API_REQUIRE_AUTH", ""},
		{"sync", "", "fsync every batch", "TRIBUTARY_EMBEDDED_KAFKA_SYNC", ""},
		{"log-format", "string", "log format: text or json", "TRIBUTARY_LOG_FORMAT", "text"},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d flags, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("flag %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
