package deploycheck

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

type compose struct {
	Services map[string]service `yaml:"services"`
}

func build(t *testing.T) string {
	dir := t.TempDir()
	for _, c := range []string{"metasrv", "datanode", "strata"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, c), "../../cmd/"+c).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", c, err, out)
		}
	}
	return dir
}

// parses runs a Strata command line with help appended: the binaries
// parse every flag before acting on help, so an unknown or malformed flag
// fails.
func parses(t *testing.T, bins string, argv []string) {
	t.Helper()
	help := "-h"
	if argv[0] == "strata" {
		help = "--help"
	}
	cmd := exec.Command(filepath.Join(bins, argv[0]), append(argv[1:], help)...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%v does not parse: %v\n%s", argv, err, out)
	}
}

func TestComposeAndImageCommandsParse(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	bins := build(t)
	ours := 0
	for name, s := range c.Services {
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			}
		}
		if !strings.Contains(s.Image, "strata:latest") {
			continue
		}
		ours++
		if len(s.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		parses(t, bins, s.Command)
		if hc := s.Healthcheck.Test; len(hc) > 1 && hc[0] == "CMD" && hc[1] == "strata" {
			parses(t, bins, hc[1:])
		}
		if s.Environment["STRATA_AUTH_TOKEN"] == "" {
			t.Errorf("%s runs without the auth token", name)
		}
	}
	if ours != 6 {
		t.Fatalf("%d Strata services, want store-init, two metasrv replicas and three datanodes", ours)
	}
	// Every variable the file requires is in .env.example; the optional
	// ones (with defaults) are there as comments.
	env, err := os.ReadFile("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)(:[?-])?`).FindAllStringSubmatch(string(data), -1) {
		if !regexp.MustCompile(`(?m)^(# )?`+m[1]+`=`).Match(env) || (m[2] != ":-" && !regexp.MustCompile(`(?m)^`+m[1]+`=`).Match(env)) {
			t.Errorf("docker-compose.yml uses ${%s}, which .env.example does not set", m[1])
		}
	}
	// The image's default command.
	found := false
	for _, line := range dockerfile(t) {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				t.Fatalf("Dockerfile CMD is not exec form: %v", err)
			}
			parses(t, bins, argv)
			found = true
		}
	}
	if !found {
		t.Fatal("the Dockerfile has no CMD")
	}
}

// TestImageBuildIsStatic runs scripts/images.sh's go build line (cgo, for
// libzstd, linked statically so that it runs on the scratch image) on
// strata's main package, and checks that the result has no dynamic loader
// and runs.
// TestComposeTLSOverride: docker-compose.tls.yml sets, on Strata's
// services only, variables that name flags their commands have.
func TestComposeTLSOverride(t *testing.T) {
	var base, tls compose
	for file, c := range map[string]*compose{"../../docker-compose.yml": &base, "../../docker-compose.tls.yml": &tls} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	bins := build(t)
	for name, s := range tls.Services {
		b, ok := base.Services[name]
		if !ok || !strings.Contains(b.Image, "strata:latest") || len(b.Command) == 0 {
			t.Errorf("docker-compose.tls.yml: %s is not a Strata service of docker-compose.yml", name)
			continue
		}
		if len(s.Environment) < 4 {
			t.Errorf("%s: %d TLS variables, want the certificate, key, CA and client CA", name, len(s.Environment))
		}
		help, _ := exec.Command(filepath.Join(bins, b.Command[0]), append(b.Command[1:], "-h")...).CombinedOutput()
		for v := range s.Environment {
			flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(v, "STRATA_")), "_", "-")
			if !strings.Contains(string(help), flag+" ") {
				t.Errorf("%s: %s names %s, which %s does not have", name, v, flag, b.Command[0])
			}
		}
	}
	if len(tls.Services) != 5 {
		t.Errorf("docker-compose.tls.yml covers %d services, want the two metasrv replicas and three datanodes", len(tls.Services))
	}
}

func TestImageBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("a static cgo build takes about a minute")
	}
	df, err := os.ReadFile("../../scripts/images.sh")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(df), "\\\n", " ")
	var line string
	for _, l := range strings.Split(joined, "\n") {
		if strings.HasPrefix(l, "CGO_ENABLED=1 go build") {
			line = l
		}
	}
	if line == "" {
		t.Fatal("scripts/images.sh has no go build step")
	}
	// The version the script stamps in: a known one here, to check.
	words := shellWords(strings.ReplaceAll(line, "${VERSION}", "v9.9.9-imagetest"))
	var env, args []string
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env, words = append(env, words[0]), words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("unexpected build step %q", line)
	}
	out := filepath.Join(t.TempDir(), "strata")
	for i := 2; i < len(words); i++ {
		switch {
		case words[i] == "-o":
			i++ // the image's output directory: build one binary here instead
		case strings.HasPrefix(words[i], "./cmd/"):
		default:
			args = append(args, words[i])
		}
	}
	cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", out, "../../cmd/strata")...)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the image's binary needs a dynamic loader (glibc), which the scratch image does not have")
		}
	}
	b, err := exec.Command(out, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("the static binary does not run: %v\n%s", err, b)
	}
	if !strings.HasPrefix(string(b), "strata v9.9.9-imagetest (revision ") {
		t.Fatalf("strata version of the image build: %q, want the stamped version", b)
	}
}

// shellWords splits a command line on spaces, keeping double-quoted words.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	quoted, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, have = !quoted, true
		case r == ' ' && !quoted:
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		words = append(words, cur.String())
	}
	return words
}
