#!/usr/bin/python3
"""ctest entry for the documentation: its links resolve and its five-minute tour runs.

    /usr/bin/python3 tests/docs_test.py SHARDSIM_BINARY SOURCE_DIR

1. Links. Every relative Markdown link `[text](target)` in README.md and docs/**/*.md (outside
   fenced code blocks and inline code spans) must name an existing file or directory, relative
   to the page that holds it. A link with a `#fragment` must point at a Markdown file (or at its
   own page, `#fragment` alone) with a heading whose GitHub slug is the fragment: lower case,
   every character but letters, digits, spaces, `-` and `_` dropped, spaces turned into `-`, and
   `-1`, `-2`, ... appended to repeated slugs. Links with a scheme (https:, mailto:) are not
   checked.
2. The tour. README.md's "## A five-minute tour" section holds the commands: in its ```sh
   blocks, every line that starts with `build/shardsim`, `tools/` or `/usr/bin/python3`, after
   any `NAME=value` environment assignments, is one command (a line ending in `\\` continues on
   the next); `#` lines are comments. A command exits
   0 unless its line ends with a comment `# exit N`, which gives the status it must exit with.
   Each command runs in order from SOURCE_DIR under /bin/sh, with `build/shardsim` replaced by
   SHARDSIM_BINARY and every `/tmp/` path moved into a temporary directory, so nothing is written
   into the source tree (Python is told not to write bytecode there either). The tour's plain
   ``` blocks are the output it shows: each of their lines but `...` must appear in what the
   commands printed on stdout.

Stdlib only, so it runs with Debian's /usr/bin/python3 (the python3 first on PATH may differ).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)[\s\S]*?(?<!`)\1(?!`)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
COMMAND_START = ("build/shardsim", "tools/", "/usr/bin/python3")
TOUR_HEADING = "## A five-minute tour"


def markdown_files(source):
    files = [os.path.join(source, "README.md")]
    for root, dirs, names in os.walk(os.path.join(source, "docs")):
        dirs.sort()
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, line


def slug(heading):
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_slugs(path, cache={}):
    if path not in cache:
        slugs, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read()):
                match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not match:
                    continue
                base = slug(match.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                slugs.add(base if count == 0 else f"{base}-{count}")
        cache[path] = slugs
    return cache[path]


def prose_paragraphs(text):
    """(first line number, paragraph) of the text outside fenced code blocks, inline code spans
    blanked out (their newlines kept, so line numbers stay right). A link may span lines."""
    paragraphs, current, first = [], [], None
    for number, line in list(prose_lines(text)) + [(None, "")]:
        if line.strip() and (not current or number == last + 1):
            first = number if not current else first
            current.append(line)
            last = number
            continue
        if current:
            paragraph = "\n".join(current)
            paragraph = CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), paragraph)
            paragraphs.append((first, paragraph))
        current = [line] if line.strip() else []
        first, last = number, number
    return paragraphs


def check_links(source):
    errors, checked = [], 0
    for page in markdown_files(source):
        with open(page, encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(page, source)
        for first, paragraph in prose_paragraphs(text):
            for match in LINK.finditer(paragraph):
                number = first + paragraph.count("\n", 0, match.start(1))
                target = match.group(1)
                if SCHEME.match(target):
                    continue
                checked += 1
                path_part, _, fragment = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), path_part)) if path_part else page
                if not os.path.exists(resolved):
                    errors.append(f"{where}:{number}: link to {target}: {os.path.relpath(resolved, source)} does not exist")
                    continue
                if not fragment:
                    continue
                if not resolved.endswith(".md") or os.path.isdir(resolved):
                    errors.append(f"{where}:{number}: link to {target}: a #fragment needs a Markdown file")
                elif fragment not in heading_slugs(resolved):
                    errors.append(f"{where}:{number}: link to {target}: {os.path.relpath(resolved, source)} "
                                  f"has no heading with the slug '{fragment}'")
    return checked, errors


def tour_section(source):
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index(TOUR_HEADING)
    except ValueError:
        sys.exit(f"README.md has no '{TOUR_HEADING}' heading")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1:end]


def tour_blocks(section):
    """(info string, [lines]) of each fenced block of the tour."""
    blocks, current = [], None
    for line in section:
        if current is None and line.startswith("```"):
            current = (line[3:].strip(), [])
        elif current is not None and line.startswith("```"):
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
    return blocks


def tour_commands(blocks):
    """(command, expected exit status) in order, from the sh blocks."""
    commands, pending = [], ""
    for info, lines in blocks:
        if info != "sh":
            continue
        for line in lines:
            stripped = line.strip()
            if pending:
                pending += " " + stripped
            elif re.sub(r"^(\w+=\S*\s+)*", "", stripped).startswith(COMMAND_START):
                pending = stripped
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            expected = 0
            status = re.search(r"#\s*exit\s+(\d+)\s*$", pending)
            if status:
                expected = int(status.group(1))
            commands.append((pending, expected))
            pending = ""
    return commands


def run_tour(shardsim, source):
    blocks = tour_blocks(tour_section(source))
    commands = tour_commands(blocks)
    if not commands:
        return 0, ["README.md: the tour has no commands"]
    errors, stdout = [], []
    scratch = tempfile.mkdtemp(prefix="shardsim_docs_test_")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    try:
        for command, expected in commands:
            # /tmp/ first: the binary's own path may lie under /tmp (a clone in /tmp/x).
            shell = re.sub(r"(?<![\w/.-])/tmp/", scratch.replace("\\", "\\\\") + "/", command)
            shell = re.sub(r"(?<![\w/.-])build/shardsim(?![\w/.-])", shardsim.replace("\\", "\\\\"), shell)
            result = subprocess.run(shell, shell=True, cwd=source, env=env, stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=600)
            stdout.append(result.stdout)
            if result.returncode != expected:
                errors.append(f"tour: `{command}` exited {result.returncode}, the tour says {expected}\n"
                              f"  ran: {shell}\n  stderr: {result.stderr.strip()[-2000:]}")
            else:
                print(f"ok (exit {expected}): {command}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    printed = "\n".join(stdout)
    printed_lines = {line.strip() for line in printed.split("\n")}
    for info, lines in blocks:
        if info:
            continue
        for line in lines:
            if line.strip() and line.strip() != "..." and line.strip() not in printed_lines:
                errors.append(f"tour: the output line `{line.strip()}` is not what the commands print")
    return len(commands), errors


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: docs_test.py SHARDSIM_BINARY SOURCE_DIR")
    shardsim, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    links, link_errors = check_links(source)
    print(f"links: {links} relative links checked in README.md and docs/, {len(link_errors)} broken")
    commands, tour_errors = run_tour(shardsim, source)
    print(f"tour: {commands} commands run, {len(tour_errors)} problems")
    for error in link_errors + tour_errors:
        print(error, file=sys.stderr)
    sys.exit(1 if link_errors or tour_errors else 0)


if __name__ == "__main__":
    main()
