package deploycheck

import (
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

func TestComposeAndDockerfileCommandsParse(t *testing.T) {
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
		if s.Image != "strata:latest" {
			continue
		}
		ours++
		if s.Build == nil {
			t.Errorf("%s: no build", name)
		}
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
	if ours != 4 {
		t.Fatalf("%d Strata services, want a metasrv and three datanodes", ours)
	}
	// Every variable the file interpolates is in .env.example.
	env, err := os.ReadFile("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)`).FindAllStringSubmatch(string(data), -1) {
		if !regexp.MustCompile(`(?m)^` + m[1] + `=`).Match(env) {
			t.Errorf("docker-compose.yml uses ${%s}, which .env.example does not set", m[1])
		}
	}
	// The Dockerfile's default command.
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(df), "\n") {
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
