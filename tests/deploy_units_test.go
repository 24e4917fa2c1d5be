package tests

import (
	"debug/elf"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSystemdUnits: systemd-analyze verify accepts every unit in
// deploy/systemd (its binaries built in place of /usr/local/bin), and
// every command line the units run is accepted by its binary — the flags
// exist and the values parse — with the environment files' variables set
// as the example says.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: deploy/local/install.sh installs it (package systemd)")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/cdc-reader", "../cmd/loader", "../cmd/api").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	units, err := filepath.Glob("../deploy/systemd/*.service")
	if err != nil || len(units) != 3 {
		t.Fatalf("units %v, %v; want reader, loader and api", units, err)
	}
	dir := t.TempDir()
	execStart := regexp.MustCompile(`(?m)^ExecStart=(\S+)(.*)$`)
	for _, u := range units {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Replace(filepath.Base(u), "@.", "@a.", 1) // an instance of a template
		m := execStart.FindStringSubmatch(string(raw))
		if m == nil {
			t.Fatalf("%s: no ExecStart", u)
		}
		local := filepath.Join(bin, filepath.Base(m[1]))
		unit := strings.Replace(string(raw), "ExecStart="+m[1], "ExecStart="+local, 1)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", filepath.Join(dir, name)).CombinedOutput()
		// Users, environment files and the network target are the host's;
		// the unit's own syntax and directives are what is checked.
		var problems []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" && !strings.Contains(l, "EnvironmentFile") && !strings.Contains(l, "User") && !strings.Contains(l, "Group") {
				problems = append(problems, l)
			}
		}
		if err != nil && len(problems) > 0 || len(problems) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, strings.Join(problems, "\n"))
		}

		// The command line, with ${VAR} from an example environment, parses.
		args := strings.Fields(strings.NewReplacer("${TRIBUTARY_SHARDS}", "0-1").Replace(m[2]))
		cmd := exec.Command(local, append(args, "--help")...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err = cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "not defined") || strings.Contains(string(out), "invalid") {
			t.Errorf("%s: %s %s --help: %v\n%s", u, filepath.Base(m[1]), strings.Join(args, " "), err, out)
		}
	}
}

// TestDockerfile: the image's build step, run as deploy/docker/Dockerfile
// writes it (no Docker engine here: the go build alone, with its
// environment and flags), gives static binaries — the distroless/static
// base has no C library — and holds every binary a unit or the Helm chart
// starts from /usr/local/bin.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../deploy/docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(raw), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build (.*) -o /out/ (.*)$`).FindStringSubmatch(joined)
	if m == nil {
		t.Fatal("Dockerfile: no `RUN CGO_ENABLED=0 go build ... -o /out/ <packages>` step")
	}
	out := t.TempDir()
	// As Docker's RUN does: the line through /bin/sh, here writing to out.
	line := "CGO_ENABLED=0 go build " + m[1] + " -o " + out + "/ " + m[2]
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	built := map[string]bool{}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		built[e.Name()] = true
		f, err := elf.Open(filepath.Join(out, e.Name()))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked: the static base image cannot run it", e.Name())
			}
		}
		f.Close()
	}
	started := regexp.MustCompile(`/usr/local/bin/([a-z-]+)`)
	files, _ := filepath.Glob("../deploy/helm/tributary/templates/*.yaml")
	units, _ := filepath.Glob("../deploy/systemd/*.service")
	files = append(files, units...)
	entry := started.FindAllStringSubmatch(string(raw), -1)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range started.FindAllStringSubmatch(string(b), -1) {
			if !built[s[1]] {
				t.Errorf("%s starts /usr/local/bin/%s, which the image does not build (it has %v)", filepath.Base(f), s[1], slices.Sorted(maps.Keys(built)))
			}
		}
	}
	for _, s := range entry {
		if !built[s[1]] {
			t.Errorf("the Dockerfile names /usr/local/bin/%s, which it does not build", s[1])
		}
	}
}
