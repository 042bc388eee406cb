#!/usr/bin/python3
"""check_doc_refs.py: the repository's own citations resolve, and a small repository with
one citation of each kind shows which resolve and which do not."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = sys.argv.pop(1)
REPO = sys.argv.pop(1)


def run(root):
    return subprocess.run(["/usr/bin/python3", SCRIPT, root], capture_output=True, text=True,
                          timeout=120)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))


class CheckDocRefsTest(unittest.TestCase):
    def make_repo(self, files, git=True):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        for rel, text in files.items():
            write(root, rel, text)
        if git:
            subprocess.run(["git", "init", "-q", root], check=True)
            subprocess.run(["git", "-C", root, "add", "."], check=True)
        return root

    def test_repository_citations_resolve(self):
        r = run(REPO)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"check_doc_refs: [1-9][0-9]* citations, 0 unresolved")

    def test_good_citations_pass(self):
        root = self.make_repo({
            "docs/a.md": """\
                # A
                ## Panel pairs (`scales apart`)
                - **Q8 MatMul** (int8): text
                3. **Modes.** text
                See "Panel pairs" above, [b](b.md).
                """,
            "docs/b.md": "# B\n",
            "src/x.h": """\
                // Wrapped across lines (docs/a.md, "Panel
                // pairs") and two at once: docs/a.md "Q8 MatMul" and "Modes".
                """,
        })
        r = run(root)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("check_doc_refs: 5 citations, 0 unresolved", r.stdout)

    def test_each_kind_of_break_is_reported(self):
        root = self.make_repo({
            "docs/a.md": """\
                # A
                ## Kept
                See "Moved away" below and [c](c.md).
                """,
            "src/x.cc": """\
                // docs/a.md, "Kept" and "Gone"; docs/missing.md, "Any"
                """,
        })
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn('src/x.cc: docs/a.md has no section "Gone"', r.stdout)
        self.assertIn('src/x.cc: docs/missing.md does not exist (cited for "Any")', r.stdout)
        self.assertIn('docs/a.md: no section "Moved away" above or below', r.stdout)
        self.assertIn("docs/a.md: link to c.md, which does not exist", r.stdout)
        self.assertIn("check_doc_refs: 5 citations, 4 unresolved", r.stdout)


    def test_outside_a_git_checkout_files_are_walked(self):
        # A source tarball: no .git; files under build trees are not read.
        root = self.make_repo({
            "docs/a.md": "# A\n## Kept\n",
            "src/x.cc": '// docs/a.md, "Kept" and "Gone"\n',
            "build/gen.cc": '// docs/a.md, "Generated"\n',
        }, git=False)
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn('src/x.cc: docs/a.md has no section "Gone"', r.stdout)
        self.assertNotIn("Generated", r.stdout)
        self.assertIn("check_doc_refs: 2 citations, 1 unresolved", r.stdout)


if __name__ == "__main__":
    unittest.main()
