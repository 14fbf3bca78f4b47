package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// These tests follow docs/RELEASING.md as written: the shell blocks of
// "Cutting vX.Y.Z", in order, up to the push, run on a clone of the
// repository as it is now, pushing to a repository of the test's own.

// releaseSteps are the shell blocks of RELEASING.md's "Cutting vX.Y.Z" up
// to the one that pushes, for version.
func releaseSteps(t *testing.T, version string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/RELEASING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, cutting, _ := strings.Cut(string(doc), "\n## Cutting vX.Y.Z\n")
	cutting, _, _ = strings.Cut(cutting, "\n## ")
	var steps []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)\n *```").FindAllStringSubmatch(cutting, -1) {
		steps = append(steps, block[1])
		if strings.Contains(block[1], "git push") {
			return strings.ReplaceAll(strings.Join(steps, "\n"), "vX.Y.Z", version)
		}
	}
	t.Fatalf("RELEASING.md's \"Cutting vX.Y.Z\" has no shell block that pushes:\n%s", cutting)
	return ""
}

// cutRelease makes a clone of main as it is now (with a LICENSE committed
// first if license), follows the release steps for version in it, and
// returns what they printed, whether they succeeded, and the repository
// they pushed to. meanwhile, if given, runs between the clone and the steps,
// with the source repository and origin.
func cutRelease(t *testing.T, version string, license bool, meanwhile ...func(source, origin string)) (output string, ok bool, origin string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	source := workingTreeCopy(t)
	git(t, source, "init", "-q", "-b", "main")
	git(t, source, "add", "-A")
	git(t, source, "commit", "-q", "-m", "main as it is")
	if license {
		// The owners' choice, made before the first release.
		if err := os.WriteFile(filepath.Join(source, "LICENSE"), []byte("the owners' license\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, source, "add", "LICENSE")
		git(t, source, "commit", "-q", "-m", "Add the license")
	}
	origin = filepath.Join(t.TempDir(), "origin.git")
	git(t, source, "clone", "-q", "--bare", source, origin)
	clone := filepath.Join(t.TempDir(), "clone")
	git(t, origin, "clone", "-q", origin, clone)
	for _, f := range meanwhile {
		f(source, origin)
	}

	steps := exec.Command("bash", "-euo", "pipefail", "-c", releaseSteps(t, version))
	steps.Dir = clone
	steps.Env = append(os.Environ(), "DLOCK_RELEASE_CHECK_SKIP_TESTS=1", "GOFLAGS=",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := steps.CombinedOutput()
	return string(out), err == nil, origin
}

// Issue 36: RELEASING.md's steps edited the CHANGELOG and dlockotel/go.mod,
// then ran .ci/release-check, which refuses a tree with uncommitted changes,
// and committed after. Followed as written, they commit "Release vX.Y.Z",
// check that commit, and tag it, both modules, once the check has passed.
func TestReleasing_TheStepsTagTheCommitThatReleaseCheckPassed(t *testing.T) {
	const version = "v0.1.0"
	out, ok, origin := cutRelease(t, version, true)
	if !ok || !strings.Contains(out, "release-check: "+version+" can be tagged") {
		t.Fatalf("the release steps failed, or did not run release-check:\n%s", out)
	}
	head := git(t, origin, "rev-parse", "main")
	for _, tag := range []string{version, "dlockotel/" + version} {
		if commit := git(t, origin, "rev-parse", tag+"^{commit}"); commit != head {
			t.Errorf("tag %s is on %s, want main's head %s", tag, commit, head)
		}
	}
	if subject := git(t, origin, "log", "-1", "--format=%s", head); subject != "Release "+version {
		t.Errorf("the tagged commit is %q, want \"Release %s\"", subject, version)
	}
	changelog := git(t, origin, "show", head+":CHANGELOG.md")
	if !strings.Contains(changelog, "\n## "+version+" (") || strings.Contains(changelog, "## Unreleased") {
		t.Errorf("the tagged CHANGELOG.md does not name %s in place of Unreleased:\n%.600s", version, changelog)
	}
}

// Issue 36: the license is the owners' to choose. Until they add one,
// release-check refuses, saying so, and the steps tag nothing.
func TestReleaseCheck_RefusesATreeWithoutALicense(t *testing.T) {
	out, ok, origin := cutRelease(t, "v0.1.0", false)
	if ok || !strings.Contains(out, "release-check: no LICENSE file") {
		t.Fatalf("the release steps without a LICENSE: ok %v, want a refusal naming LICENSE:\n%s", ok, out)
	}
	if tags := git(t, origin, "tag"); tags != "" {
		t.Fatalf("refused, the steps still pushed tags: %s", tags)
	}
}

// Issue 36: main moved on origin while the release was cut (another push).
// release-check fetches and refuses a release commit not on top of
// origin's main, and nothing is pushed: no tag names a commit main lacks.
func TestReleaseCheck_RefusesAReleaseBehindOriginsMain(t *testing.T) {
	out, ok, origin := cutRelease(t, "v0.1.0", true, func(source, origin string) {
		if err := os.WriteFile(filepath.Join(source, "NEWS"), []byte("meanwhile\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, source, "add", "NEWS")
		git(t, source, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "Meanwhile")
		git(t, source, "push", "-q", origin, "main")
	})
	if ok || !strings.Contains(out, "release-check: ") {
		t.Fatalf("the release steps behind origin's main: ok %v, want release-check's refusal:\n%s", ok, out)
	}
	if tags := git(t, origin, "tag"); tags != "" {
		t.Fatalf("refused, the steps still pushed tags: %s\n%s", tags, out)
	}
}

// Issue 36: a tag of the version that exists on origin only (pushed from
// elsewhere) is refused before anything is tagged.
func TestReleaseCheck_RefusesATagThatExistsOnOrigin(t *testing.T) {
	out, ok, _ := cutRelease(t, "v0.1.0", true, func(source, origin string) {
		git(t, source, "tag", "dlockotel/v0.1.0")
		git(t, source, "push", "-q", origin, "dlockotel/v0.1.0")
	})
	if ok || !strings.Contains(out, "release-check: tag dlockotel/v0.1.0 exists") {
		t.Fatalf("the release steps with the tag on origin: ok %v, want a refusal naming it:\n%s", ok, out)
	}
}
