package deploy_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryIsSelfContained keeps the repository's code, comments and
// documents from pointing outside the repository: no text file may name a
// path above the repository root or the specification documents the project
// was built from. The retry policy is docs/retry-policy.md; cite its
// sections instead.
func TestRepositoryIsSelfContained(t *testing.T) {
	t.Parallel()
	// Built from parts, so that this file does not match itself.
	needles := []string{
		".." + "/shared",
		"shared" + "/spec",
		"reference" + "-notes",
		"retry-policy" + "-source",
		"wire-formats" + ".md",
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := repoFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no files found in the repository")
	}
	for _, rel := range files {
		if skipForSelfContained(rel) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, n := range needles {
				if strings.Contains(line, n) {
					t.Errorf("%s:%d points outside the repository (%q); cite docs/retry-policy.md instead", rel, i+1, n)
				}
			}
		}
	}
}

// repoFiles lists the repository's files relative to root: the tracked and
// untracked-but-not-ignored files git knows, or, without git, every file
// under root.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, filepath.FromSlash(f))
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// skipForSelfContained reports whether rel is outside the check: vendored
// and generated trees.
func skipForSelfContained(rel string) bool {
	rel = filepath.ToSlash(rel)
	if strings.Contains("/"+rel, "/node_modules/") {
		return true
	}
	return strings.HasPrefix(rel, "api/gen/") || strings.HasPrefix(rel, "api/third_party/")
}
