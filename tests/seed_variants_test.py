#!/usr/bin/python3
"""ctest entry: every bundled scenario matches its [expect] at another seed too.

    /usr/bin/python3 tests/seed_variants_test.py SHARDSIM_BINARY SOURCE_DIR DELTA

Each scenario under SOURCE_DIR/scenarios/ is copied with its top-level `seed` plus DELTA (new
inputs, parameters and dropout masks; tensors with their own `init.seed` keep theirs; a scenario
without a seed, whose default is 0, gets `seed = DELTA`) and replayed with
`shardsim run --quiet`, which exits 0 exactly when the outcome matches the
scenario's [expect]: a clean scenario passes, a seeded fault fails at the step, tensor and op its
[expect] names. The bundled expectations were written at one seed each; a fault whose
detection, or whose first divergent boundary, held only for the drawn values (a gap that
happens to exceed a tolerance, a mask that happens to hit) would show here, as would a
tolerance that a clean scenario's rounding noise exceeds at other values. So this is evidence
that the verdicts come from the mechanisms and not from the seed.

It found one case when it was written (2026-12-03): norm_wrong_axis at seed + 100003 moves the
all-reduced loss sum by 4.8e-4 relative, within f32's rtol of 2^-8, so the replay named f32's
later first divergence (grad(y)) instead of the loss sum where f64 already failed; the replay
now names the earliest failing boundary at any precision (compare.hpp, earliest_failure).
Input files named relative to a scenario are made absolute in the copy.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

SEED = re.compile(r"(?m)^seed = (\d+)")
NAME = re.compile(r"(?m)^name = \"[^\"]*\"")
RELATIVE_FILE = re.compile(r'(\bfile\s*=\s*")([^"/][^"]*)"')


def variant(path, delta):
    text = open(path).read()
    found = SEED.search(text)
    if found:
        seed = "seed = %d" % (int(found.group(1)) + delta)
        text = text[:found.start()] + seed + text[found.end():]
    else:  # the default seed is 0 (a captured scenario: its values come from files, its dropout
        # masks from the seed)
        name = NAME.search(text)
        if not name:
            return None
        text = text[:name.end()] + "\nseed = %d" % delta + text[name.end():]
    folder = os.path.dirname(os.path.abspath(path))
    return RELATIVE_FILE.sub(lambda m: m.group(1) + os.path.join(folder, m.group(2)) + '"', text)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, source, delta = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scenarios = sorted(glob.glob(os.path.join(source, "scenarios", "**", "*.toml"), recursive=True))
    if not scenarios:
        sys.exit("no scenarios under %s" % source)
    problems, replayed = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        for path in scenarios:
            name = os.path.relpath(path, os.path.join(source, "scenarios"))
            text = variant(path, delta)
            if text is None:
                problems.append("%s: no top-level name" % name)
                continue
            copy = os.path.join(scratch, name.replace("/", "_"))
            with open(copy, "w") as f:
                f.write(text)
            done = subprocess.run([binary, "run", "--quiet", copy], capture_output=True, text=True)
            replayed += 1
            if done.returncode != 0:
                lines = (done.stdout + done.stderr).strip().splitlines()
                problems.append("%s (seed + %d): exit %d\n    %s" %
                                (name, delta, done.returncode, "\n    ".join(lines[-4:])))
    print("%d scenarios replayed at seed + %d" % (replayed, delta))
    for problem in problems:
        print("MISMATCH " + problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
