#!/usr/bin/python3
"""Every kvfold binary follows the command-line convention of docs/cli.md.

For each binary given (and, for `kvfold` and `kvfold-memory-admin`, each subcommand its
--help lists):
  --help         exit 0; every flag in the option column shows its default (`=value`) or
                 REQUIRED;
  --version      exit 0; "<name> <project version>" then "commit <40 hex>" (a commit of the
                 source checkout) or "commit unknown" (sources outside git);
  --bogus-flag   exit 2, named on stderr;
  a snake_case spelling of one of its real flags: exit 2 and the kebab-case hint;
  --threads=-1   (where it has --threads) exit 2, "--threads: must be >= 0, got -1".

usage: cli_tool_test.py PROJECT_VERSION SOURCE_DIR BINARY...
"""
import os
import re
import subprocess
import sys

OPTION_LINE = re.compile(r"  (-\S+)(.*)")


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def options(help_text):
    """[(first long name, the rest of its help line)] of the option column."""
    out = []
    for line in help_text.splitlines():
        m = OPTION_LINE.match(line)
        if not m:
            continue
        names = re.findall(r"--[a-z0-9][a-z0-9-]*", m.group(1))
        if names:
            out.append((names[0], m.group(1)[len(names[0]):] + m.group(2)))
    return out


def subcommands(help_text):
    if "Subcommands:" not in help_text:
        return []
    section = help_text.split("Subcommands:", 1)[1]
    return re.findall(r"^  ([a-z][a-z0-9-]*)\s", section, re.M)


def git_commits(source_dir):
    r = subprocess.run(["git", "-C", source_dir, "rev-parse", "--show-toplevel"],
                       capture_output=True, text=True)
    if r.returncode != 0 or os.path.realpath(r.stdout.strip()) != os.path.realpath(source_dir):
        return None  # not a checkout of its own: "unknown" expected
    return lambda c: subprocess.run(["git", "-C", source_dir, "cat-file", "-e", c + "^{commit}"],
                                    capture_output=True).returncode == 0


def check_command(argv, problems):
    """--help, unknown flag and snake spelling of `argv` (a binary or binary + subcommand)."""
    what = " ".join(os.path.basename(a) for a in argv[:1]) + "".join(" " + a for a in argv[1:])
    h = run(argv + ["--help"])
    if h.returncode != 0:
        problems.append(f"{what} --help: exit {h.returncode}: {h.stderr}")
        return [], ""
    opts = options(h.stdout)
    if not any(name == "--help" for name, _ in opts):
        problems.append(f"{what} --help lists no --help:\n{h.stdout}")
    for name, rest in opts:
        if name in ("--help", "--version", "--config"):
            continue
        if "=" not in rest.split("  ")[0] and "REQUIRED" not in rest:
            problems.append(f"{what} --help: {name} shows no default: '{rest.strip()}'")
    bogus = run(argv + ["--bogus-flag"])
    if bogus.returncode != 2 or "--bogus-flag" not in bogus.stderr:
        problems.append(f"{what} --bogus-flag: exit {bogus.returncode}, stderr {bogus.stderr!r}")
    dashed = [n for n, _ in opts if "-" in n[2:] and n not in ("--help", "--version")]
    if dashed:
        kebab = dashed[0]
        snake = "--" + kebab[2:].replace("-", "_")
        r = run(argv + [snake + "=1"])
        if r.returncode != 2 or f"kebab-case: {kebab}" not in r.stderr:
            problems.append(f"{what} {snake}=1: exit {r.returncode}, stderr {r.stderr!r}")
    if any(name == "--threads" for name, _ in opts):
        r = run(argv + ["--threads=-1"])
        if r.returncode != 2 or "--threads: must be >= 0, got -1" not in r.stderr:
            problems.append(f"{what} --threads=-1: exit {r.returncode}, stderr {r.stderr!r}")
    return opts, h.stdout


def main():
    version, source_dir, binaries = sys.argv[1], sys.argv[2], sys.argv[3:]
    is_commit = git_commits(source_dir)
    problems, commands = [], 0
    for binary in binaries:
        name = os.path.basename(binary)
        v = run([binary, "--version"])
        lines = v.stdout.splitlines()
        if v.returncode != 0 or len(lines) != 2 or lines[0] != f"{name} {version}":
            problems.append(f"{name} --version: exit {v.returncode}, {v.stdout!r}")
        else:
            m = re.fullmatch(r"commit ([0-9a-f]{40}|unknown)", lines[1])
            if not m:
                problems.append(f"{name} --version: bad commit line {lines[1]!r}")
            elif is_commit is None and m.group(1) != "unknown":
                problems.append(f"{name} --version: {m.group(1)} outside a git checkout")
            elif is_commit is not None and not is_commit(m.group(1)):
                problems.append(f"{name} --version: {m.group(1)} is not a commit of {source_dir}")
        _, help_text = check_command([binary], problems)
        commands += 1
        for sub in subcommands(help_text):
            check_command([binary, sub], problems)
            commands += 1
    for p in problems:
        print("cli_tool_test:", p)
    print(f"cli_tool_test: {len(binaries)} binaries, {commands} commands: "
          f"{'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
