package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/template"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
)

func TestHelpTopics(t *testing.T) {
	for _, topic := range []string{"templates", "suites", "pools", "ensembles"} {
		t.Run(topic, func(t *testing.T) {
			code, out, stderr := runArgs(t, "help", topic)
			if code != 0 || out != helpTopics[topic].text {
				t.Errorf("nodemgr help %s = exit %d, %d bytes (stderr %q); want 0 and the page", topic, code, len(out), stderr)
			}
		})
	}
}

func TestHelpStillHelpsWithCommands(t *testing.T) {
	code, out, _ := runArgs(t, "help", "pool", "apply")
	if code != 0 || !strings.Contains(out, "nodemgr pool apply") {
		t.Errorf("nodemgr help pool apply = exit %d, %q; want the command's help", code, out)
	}
	code, out, _ = runArgs(t, "help")
	if code != 0 || !strings.Contains(out, "nodemgr help templates") {
		t.Errorf("nodemgr help = exit %d; want the root's help naming the topics, got %q", code, out)
	}
}

func TestHelpRefusesAnUnknownTopic(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "tempaltes"}, `did you mean templates?`},
		{[]string{"help", "pol"}, `did you mean pool?`},
		{[]string{"help", "bananas"}, `no help topic or command "bananas" (topics: ensembles, pools, suites, templates`},
		{[]string{"help", "pool", "bogus"}, `no help topic or command "pool bogus"`},
	} {
		code, _, stderr := runArgs(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("nodemgr %q = exit %d, %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// topicFiles pulls the YAML examples out of a topic page: the indented
// block after each "# NAME.yaml" line, up to the first blank line.
func topicFiles(text string) map[string]string {
	files := map[string]string{}
	re := regexp.MustCompile(`(?m)^  # (\S+\.yaml)\b.*\n((?:  .+\n)+)`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(m[2], "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "  "))
		}
		files[m[1]] = strings.Join(lines, "\n") + "\n"
	}
	return files
}

// TestHelpTopicExamplesLoad: each page's YAML loads strictly with the
// loader its command uses, so the pages cannot teach a key that is gone.
func TestHelpTopicExamplesLoad(t *testing.T) {
	load := map[string]func(path string, b []byte) error{
		"web.yaml": func(path string, b []byte) error { _, err := template.Parse(b, path); return err },
		"debian-vm.yaml": func(path string, b []byte) error {
			tp, err := template.Parse(b, path)
			if err == nil {
				_, _, err = template.Render(tp, "libvirt", nil)
			}
			return err
		},
		"images.yaml": func(path string, b []byte) error { _, err := mapping.Parse(b, path); return err },
		"suite.yaml":  func(path string, _ []byte) error { _, err := LoadSuiteFile(path); return err },
		"pool.yaml":   func(path string, _ []byte) error { _, err := LoadPoolFile(path); return err },
		"shop.yaml": func(path string, _ []byte) error {
			var spec api.EnsembleSpec
			return loadYAML(path, &spec)
		},
	}
	seen := 0
	for topic, page := range helpTopics {
		for name, content := range topicFiles(page.text) {
			fn := load[name]
			if fn == nil {
				t.Errorf("help %s: example %s has no loader in this test", topic, name)
				continue
			}
			seen++
			path := filepath.Join(t.TempDir(), name)
			os.WriteFile(path, []byte(content), 0o600)
			if err := fn(path, []byte(content)); err != nil {
				t.Errorf("help %s: example %s does not load: %v\n%s", topic, name, err, content)
			}
		}
	}
	if seen != len(load) {
		t.Errorf("found %d examples in the topics, want %d", seen, len(load))
	}
}

// TestCompletionScripts: the scripts cobra makes from the command table
// come out for each shell, and the shells installed here parse them.
func TestCompletionScripts(t *testing.T) {
	for _, tc := range []struct{ shell, parse string }{
		{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"},
	} {
		t.Run(tc.shell, func(t *testing.T) {
			code, out, stderr := runArgs(t, "completion", tc.shell)
			if code != 0 || !strings.Contains(out, "nodemgr") {
				t.Fatalf("nodemgr completion %s = exit %d, stderr %q", tc.shell, code, stderr)
			}
			sh, err := exec.LookPath(tc.shell)
			if err != nil {
				t.Skipf("%s is not installed: the script is not parsed", tc.shell)
			}
			path := filepath.Join(t.TempDir(), "nodemgr."+tc.shell)
			os.WriteFile(path, []byte(out), 0o644)
			if out, err := exec.Command(sh, tc.parse, path).CombinedOutput(); err != nil {
				t.Errorf("%s %s (the completion script): %v\n%s", tc.shell, tc.parse, err, out)
			}
		})
	}
}

// TestCompletionKnowsCommandsAndTopics asks the completion engine the
// scripts call (nodemgr __complete) what follows a word.
func TestCompletionKnowsCommandsAndTopics(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "po"}, []string{"pool"}},
		{[]string{"__complete", "pool", ""}, []string{"apply", "events", "ls", "rm", "show"}},
		{[]string{"__complete", "help", ""}, []string{"templates", "suites", "pools", "ensembles", "server"}},
		{[]string{"__complete", "server", "--print-c"}, []string{"--print-config"}},
	} {
		_, out, _ := runArgs(t, tc.args...)
		for _, w := range tc.want {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w) + `(\t|$)`).MatchString(out) {
				t.Errorf("nodemgr %q offers no %q:\n%s", tc.args, w, out)
			}
		}
	}
}
