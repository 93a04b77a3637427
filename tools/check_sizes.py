#!/usr/bin/env python3
"""Size limits of the source tree: no file over 400 lines and no function over 80 lines.

Usage: tools/check_sizes.py [ROOT]   (exit 1 and one line per violation)

Files: every .cpp/.hpp/.py under include/, sim/, tests/ and tools/, and every .py under python/
and examples/ (Python files: the file limit only). Functions: a
brace block whose opening line ends a C++ signature (`) {`, `) const {`, `) override {`, ...),
measured from that line to its closing brace; string literals and comments are skipped when
counting braces. A data table (a block opened by `= {` or `{{`) is not a function, and the
lines inside a data table do not count towards the length of the function that holds it (a
function that builds and returns a table, e.g. the fault catalogue, is measured by its code
around the table). A file or function may opt out with a comment `// size-limit: exempt
(REASON)` on its first line or its signature line; the reason is printed, so exemptions stay
visible.
"""
import pathlib
import re
import sys

FILE_LIMIT = 400
FUNCTION_LIMIT = 80
SIGNATURE = re.compile(r"\)\s*(const\s*)?(override\s*)?(noexcept\s*)?(->\s*[\w:<>&*, ]+)?\{\s*(//.*)?$")


def code_only(line, state):
    """`line` with comments and string/char literals blanked; state carries /* */ across lines."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"] = False
            i = end + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if line.startswith('R"', i):
            delim_end = line.find("(", i)
            delim = line[i + 2:delim_end]
            end = line.find(")" + delim + '"', delim_end)
            if end < 0:
                state["raw"] = ")" + delim + '"'
                return "".join(out)
            i = end + len(delim) + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < len(line) and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(lines):
    """(first line, last line, table lines) of each outermost function; table lines: the lines
    strictly inside the data tables it holds."""
    state = {"block": False, "raw": None}
    stack = []  # (line index, kind): kind is "function", "table" or None
    found = []
    tables = []  # (first line, last line) of each data table not inside another
    for n, raw in enumerate(lines):
        if state["raw"]:
            end = raw.find(state["raw"])
            if end < 0:
                continue
            raw = raw[end + len(state["raw"]):]
            state["raw"] = None
        code = code_only(raw, state)
        for c in code:
            if c == "{":
                is_table = bool(re.search(r"=\s*\{|\{\{", code))
                is_function = bool(SIGNATURE.search(code)) and not is_table
                kinds = [k for _, k in stack]
                if is_function and "function" not in kinds:
                    kind = "function"
                elif is_table and "table" not in kinds:
                    kind = "table"
                else:
                    kind = None
                stack.append((n, kind))
            elif c == "}" and stack:
                start, kind = stack.pop()
                if kind == "function":
                    found.append((start, n))
                elif kind == "table":
                    tables.append((start, n))
    return [(start, end, sum(max(0, t_end - t_start - 1) for t_start, t_end in tables
                             if start < t_start and t_end < end))
            for start, end in found]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    paths = []
    for folder in ("include", "sim", "tests", "tools", "python", "examples"):
        paths += [p for p in (root / folder).rglob("*") if p.suffix in (".cpp", ".hpp", ".py")]
    problems = []
    for path in sorted(paths):
        if "corpus" in path.parts:
            continue
        lines = path.read_text(errors="replace").split("\n")
        rel = path.relative_to(root)
        if "size-limit: exempt" in lines[0]:
            print(f"note: {rel}: exempt: {lines[0].split('exempt', 1)[1].strip()}")
            continue
        if len(lines) - 1 > FILE_LIMIT:
            problems.append(f"{rel}: {len(lines) - 1} lines (limit {FILE_LIMIT})")
        if path.suffix == ".py":
            continue
        for start, end, table_lines in functions(lines):
            length = end - start + 1 - table_lines
            if length > FUNCTION_LIMIT and "size-limit: exempt" not in lines[start]:
                problems.append(f"{rel}:{start + 1}: function of {length} lines (limit "
                                f"{FUNCTION_LIMIT}): {lines[start].strip()[:60]}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
