package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// git runs git in dir, failing the test on an error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// buildFromCheckout builds dlock from a git checkout of this module's
// files as they are now, with VCS stamping on: go build stamps nothing in
// a git worktree (whose .git is a file), and GOFLAGS may turn it off.
func buildFromCheckout(t *testing.T, checkout string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dlock")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/dlock")
	build.Dir = checkout
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// workingTreeCopy copies this repository's files as they are now, committed
// or not (but those git ignores), to a new directory, and returns it.
func workingTreeCopy(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checkout := t.TempDir()
	for _, file := range strings.Split(git(t, root, "ls-files", "-co", "--exclude-standard"), "\n") {
		data, err := os.ReadFile(filepath.Join(root, file))
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(checkout, file)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if info, err := os.Stat(filepath.Join(root, file)); err == nil && info.Mode()&0o111 != 0 {
			mode = 0o755 // .ci's scripts
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	return checkout
}

func TestVersion_PrintsTheModuleVersionAndTheRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	checkout := workingTreeCopy(t)
	git(t, checkout, "init", "-q")
	git(t, checkout, "add", "-A")
	git(t, checkout, "commit", "-q", "-m", "the module as it is")
	revision := git(t, checkout, "rev-parse", "HEAD")

	// go version -m reads the same build information from the binary.
	for _, modified := range []bool{false, true} {
		if modified {
			if err := os.WriteFile(filepath.Join(checkout, "README.md"), []byte("changed\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		bin := buildFromCheckout(t, checkout)
		module := ""
		if info, err := exec.Command("go", "version", "-m", bin).Output(); err == nil {
			for _, line := range strings.Split(string(info), "\n") {
				if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/dlockio/dlock" {
					module = f[2]
				}
			}
		}
		out, err := exec.Command(bin, "version").Output()
		version := string(out)
		if err != nil || module == "" || !strings.HasPrefix(version, "dlock "+module+" ") ||
			!strings.Contains(version, "revision "+revision) || strings.Contains(version, "modified") != modified {
			t.Fatalf("built from a checkout of %s (modified: %v): %v, %q; want module version %q, the revision, and modified only if so",
				revision, modified, err, version, module)
		}
	}

	// Built without VCS stamping (as the other tests build it), it says so.
	if code, stdout, _ := runDlock(t, "", "version"); code != 0 || !strings.HasPrefix(stdout, "dlock (devel) ") ||
		!strings.Contains(stdout, "revision unknown") {
		t.Fatalf("built without VCS information: exit %d, %q", code, stdout)
	}
}
