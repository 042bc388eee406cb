#!/usr/bin/python3
"""Checks that every citation of a docs/ section in the repository names a section that
exists.

A citation is `docs/NAME.md` followed (after an optional comma or colon, and an optional
opening parenthesis) by one or more quoted titles joined by commas or "and", e.g.
`docs/engine.md, "Q8 MatMul" and "Panel pairs"`. Inside docs/NAME.md itself, a quoted title
followed by "above" or "below" cites a section of the same file. A title resolves when it
is the start of a heading of that file, or of a bold lead (`**Title**` opening a line or a
list item, numbered or not). A Markdown link in any .md file to a relative .md path must
name a file that exists. Comment leaders (`//`, `#`, `*`) are dropped and lines joined
first, so a citation may wrap across comment lines. The files read are the checkout's
tracked files, or outside a git checkout (a source tarball) every file but those under
hidden directories, build trees and node_modules.

Usage: check_doc_refs.py [REPO_ROOT]   (default: the repository this script is in)
Prints each citation that does not resolve and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

# This script and its test quote citations as examples.
SKIP = {"scripts/check_doc_refs.py", "tests/scripts/check_doc_refs_test.py"}
TEXT_SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".py", ".sh", ".txt", ".cmake", ".md", ".yaml",
                 ".yml", ".proto", ".js", ".mjs", ".json", ".toml", ".cfg")
CITE = re.compile(r'docs/([A-Za-z0-9_.-]+\.md)(?:[,:]\s*|\s+)\(?'
                  r'((?:"[^"\n]{2,160}"(?:,\s*|\s+and\s+)?)+)')
LOCAL = re.compile(r'"([^"\n]{2,160})"\)?\s+(?:above|below)\b')
LINK = re.compile(r'\]\(([^)#\s:]+\.md)(?:#[^)\s]*)?\)')
TITLE = re.compile(r'"([^"]+)"')
HEADING = re.compile(r'^#{1,6}\s+(.+?)\s*$', re.M)
BOLD_LEAD = re.compile(r'^\s*(?:[-*]\s+|\d+\.\s+)?\*\*(.+?)\*\*', re.M)
# A comment leader at the start of a line, removed before matching so that a citation
# wrapped over comment lines reads as one line.
LEADER = re.compile(r'\n[ \t]*(?://+|#(?!#)|\*(?!\*))?[ \t]*')


def candidate_files(root):
    """The repository's tracked files; outside a git checkout (a source tarball), every
    file under root except hidden directories, build trees and node_modules."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if os.path.realpath(top) != os.path.realpath(root):
            raise OSError("root is not the top of a git checkout")
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
        return out.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "build")) and
                           d != "node_modules"]
            files += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
        return files


def tracked_files(root):
    return [f for f in candidate_files(root) if f not in SKIP and
            (f.endswith(TEXT_SUFFIXES) or os.path.basename(f) == "CMakeLists.txt")]


def titles_of(text):
    return [t.strip() for t in HEADING.findall(text) + BOLD_LEAD.findall(text)]


def resolves(title, titles):
    title = title.strip()
    return any(t == title or t.startswith(title) for t in titles)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    docs = {}
    for name in os.listdir(os.path.join(root, "docs")):
        if name.endswith(".md"):
            with open(os.path.join(root, "docs", name), encoding="utf-8") as f:
                docs[name] = titles_of(f.read())
    bad = []
    count = 0
    for rel in tracked_files(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            continue
        flat = LEADER.sub(" ", text)
        for m in CITE.finditer(flat):
            name = m.group(1)
            for title in TITLE.findall(m.group(2)):
                count += 1
                if name not in docs:
                    bad.append(f"{rel}: docs/{name} does not exist (cited for \"{title}\")")
                elif not resolves(title, docs[name]):
                    bad.append(f"{rel}: docs/{name} has no section \"{title}\"")
        if rel.endswith(".md"):
            for m in LINK.finditer(text):
                count += 1
                target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                if not os.path.isfile(target):
                    bad.append(f"{rel}: link to {m.group(1)}, which does not exist")
        if rel.startswith("docs/") and rel.endswith(".md"):
            name = rel[len("docs/"):]
            for m in LOCAL.finditer(flat):
                count += 1
                if not resolves(m.group(1), docs.get(name, [])):
                    bad.append(f"{rel}: no section \"{m.group(1)}\" above or below")
    for line in bad:
        print(line)
    print(f"check_doc_refs: {count} citations, {len(bad)} unresolved")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
