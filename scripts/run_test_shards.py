#!/usr/bin/env python3
"""Run a build's GoogleTest tests a few processes per binary instead of one process per test.

usage: scripts/run_test_shards.py --build DIR [--regex RE] [--jobs N] [--per-shard K]
                                  [--fuzz-per-shard K] [--timeout S] [--out DIR]

ctest runs every test that gtest_discover_tests registered in a process of its own. On a
GPU each of those processes creates a CUDA context first, about 1.5-2 s with ten processes
sharing one GPU: more than most of the course's tests take, and in a test suite of a few
thousand tests most of its time. This runner takes the same list from ctest
(`ctest --show-only=json-v1`: each test's name, binary and --gtest_filter), runs each binary
in ceil(tests / K) shards (GoogleTest's GTEST_SHARD_INDEX and GTEST_TOTAL_SHARDS; binaries
named *fuzz*, whose tests are long, in shards of --fuzz-per-shard tests), N shards at a
time, heaviest first, and reports in ctest's words: "P% tests passed, F tests failed out of
T", one line per skipped test ending in "(Skipped)", and "The following tests FAILED:"
with ctest's test names, so that scripts reading ctest's log read this one. Tests that are
not one GoogleTest case each (a script, a target that was not built) run through one ctest call.

Tests of one shard share a process. A shard that crashes or outlives --timeout fails the
test that was running and every test of the shard that had not finished; a CUDA error that
poisons the context fails the tests after it as well. Rerun a failed test alone with
`ctest --test-dir DIR -R '^NAME$' --output-on-failure`.

Per shard, the binary's output goes to OUT/shards/<binary>.<i>.log; OUT/tests.log collects
them and ends with the summary, which is also printed. Exit status 0 when no test failed,
8 otherwise (ctest's).
"""
import argparse
import concurrent.futures
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

RESULT = re.compile(r"^\[\s*(OK|SKIPPED|FAILED)\s*\] (\S+?)(?:,| \(|$)")
RUN = re.compile(r"^\[ RUN\s*\] (\S+)")


def gtest_case(cmd):
    """(binary, gtest name) of a ctest command that runs one GoogleTest case, else (None, None).
    gtest_discover_tests writes one of two forms: `BINARY --gtest_filter=NAME ...` (CMake up to
    4.2) or, from CMake 4.3, `cmake -D TEST_EXECUTABLE=BINARY -D TEST_EXECUTOR= -D TEST_FILTER=NAME
    ... -P .../GoogleTest/LaunchTest.cmake`. A filter with wildcards or several names, or a test
    run through an executor (an emulator), is not one case of one binary: ctest runs it."""
    if not cmd:
        return None, None
    if cmd[-1].endswith("LaunchTest.cmake"):
        defs = dict(a.split("=", 1) for a in cmd if "=" in a and re.match(r"^TEST_[A-Z_]+=", a))
        binary, filters = defs.get("TEST_EXECUTABLE"), [defs.get("TEST_FILTER", "")]
        if defs.get("TEST_EXECUTOR"):
            return None, None
    else:
        binary = cmd[0]
        filters = [a[len("--gtest_filter="):] for a in cmd[1:] if a.startswith("--gtest_filter=")]
    if not binary or len(filters) != 1 or not filters[0] or any(c in filters[0] for c in "*?:-"):
        return None, None
    return binary, filters[0]


def listed_tests(build):
    """ctest's tests: [(ctest name, binary or None, gtest name or None, working dir)]."""
    out = subprocess.run(["ctest", "--test-dir", str(build), "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    tests = []
    for t in json.loads(out).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        binary, gtest = gtest_case(t.get("command") or [])
        if props.get("DISABLED"):  # GoogleTest's DISABLED_ cases: ctest lists them as not run
            binary, gtest = None, None
        tests.append((t["name"], binary, gtest, props.get("WORKING_DIRECTORY")))
    return tests


def plan_shards(tests, per_shard, fuzz_per_shard):
    """[(binary, working dir, [(ctest name, gtest name)], index, count)], heaviest first."""
    by_binary = {}
    for name, binary, gtest, cwd in tests:
        if binary:
            by_binary.setdefault((binary, cwd), []).append((name, gtest))
    shards = []
    for (binary, cwd), cases in by_binary.items():
        fuzz = "fuzz" in pathlib.Path(binary).name
        count = max(1, math.ceil(len(cases) / (fuzz_per_shard if fuzz else per_shard)))
        weight = len(cases) / count * (10 if fuzz else 1)
        shards += [(weight, binary, cwd, cases, i, count) for i in range(count)]
    shards.sort(key=lambda s: -s[0])
    return [s[1:] for s in shards]


def run_shard(binary, cwd, cases, index, count, every, timeout, logdir):
    """Runs one shard; returns ({ctest name: 'passed' | 'skipped' | 'failed'}, log path, seconds).
    With `every` False the binary gets the cases' names as its --gtest_filter (a --regex run)."""
    gtest_to_ctest = dict((g, n) for n, g in cases)
    log = logdir / f"{pathlib.Path(binary).name}.{index}.log"
    env = dict(os.environ, GTEST_SHARD_INDEX=str(index), GTEST_TOTAL_SHARDS=str(count))
    cmd = [binary] + ([] if every else ["--gtest_filter=" + ":".join(g for _, g in cases)])
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=cwd or None, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
            why = f"exit status {rc}"
        except subprocess.TimeoutExpired:
            rc, why = -1, f"timed out after {timeout} s"
    status, running = {}, None
    for line in log.read_text(errors="replace").splitlines():
        if m := RUN.match(line):
            running = m.group(1)
        elif (m := RESULT.match(line)) and m.group(2) in gtest_to_ctest:
            status.setdefault(gtest_to_ctest[m.group(2)], {"OK": "passed", "SKIPPED": "skipped"}.get(m.group(1), "failed"))
            running = None
    # Which of the binary's cases GoogleTest dealt this shard is known only from what it ran;
    # when the process dies, the cases it never reached go unreported, and main() fails every
    # case that no shard reported.
    crashed = rc not in (0, 1) or (rc == 1 and not any(v == "failed" for v in status.values()))
    if running is not None and running in gtest_to_ctest:
        status[gtest_to_ctest[running]] = "failed"
    if crashed:
        with open(log, "a") as f:
            f.write(f"\n[run_test_shards] shard {index}/{count} of {binary}: {why}"
                    + (f", while running {running}" if running else "") + "\n")
    return status, log, time.monotonic() - t0, crashed


CTEST_LINE = re.compile(r"Test\s+#\d+: (\S+) .*?(Passed|\*\*\*\S.*?)\s+[0-9.]+ sec")


def run_ctest(build, names, jobs, timeout, logdir):
    """Runs the tests that are not one GoogleTest case through one ctest call (-j jobs; one call,
    so that ctest's PRE_TEST discovery is not redone, and rewritten, by several at once).
    Returns ({ctest name: status}, log path); a name ctest did not report counts as failed."""
    log = logdir / "ctest-others.log"
    regex = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    with open(log, "w") as f:
        subprocess.run(["ctest", "--test-dir", str(build), "-R", regex, "-j", str(jobs),
                        "--output-on-failure", "--timeout", str(timeout)],
                       stdout=f, stderr=subprocess.STDOUT)
    status = {}
    for m in CTEST_LINE.finditer(log.read_text(errors="replace")):
        word = m.group(2)
        status[m.group(1)] = ("passed" if word == "Passed" else
                              "skipped" if "Skipped" in word or "Not Run (Disabled)" in word else "failed")
    return {n: status.get(n, "failed") for n in names}, log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=pathlib.Path, required=True, help="the CMake build folder")
    ap.add_argument("--regex", help="only the tests whose ctest name matches (ctest -R)")
    ap.add_argument("--jobs", type=int, default=8, help="shards running at once")
    ap.add_argument("--per-shard", type=int, default=40, help="tests per shard")
    ap.add_argument("--fuzz-per-shard", type=int, default=2, help="tests per shard of a *fuzz* binary")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per shard")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("test-shards-out"))
    args = ap.parse_args()
    t0 = time.monotonic()
    tests = listed_tests(args.build)
    if args.regex:
        tests = [t for t in tests if re.search(args.regex, t[0])]
    order = {t[0]: i + 1 for i, t in enumerate(tests)}
    logdir = args.out / "shards"
    logdir.mkdir(parents=True, exist_ok=True)
    for old in logdir.glob("*.log"):
        old.unlink()
    every = not args.regex
    shards = plan_shards(tests, args.per_shard, args.fuzz_per_shard)
    others = [t[0] for t in tests if not t[1]]
    status, logs, problems = {}, [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_shard, *s, every, args.timeout, logdir): s for s in shards}
        if others:
            futures[pool.submit(run_ctest, args.build, others, max(1, args.jobs // 2), args.timeout, logdir)] = None
        for fut in concurrent.futures.as_completed(futures):
            s = futures[fut]
            if s is None:
                result, log = fut.result()
                status.update(result)
                logs.append(log)
                for name, r in result.items():
                    print(f"[{time.monotonic() - t0:6.0f} s] {name}: {r} (ctest)", flush=True)
                continue
            got, log, seconds, crashed = fut.result()
            status.update(got)
            logs.append(log)
            binary, _, cases, index, count = s
            if crashed:
                problems.append(log)
            counts = {k: sum(1 for v in got.values() if v == k) for k in ("passed", "skipped", "failed")}
            print(f"[{time.monotonic() - t0:6.0f} s] {pathlib.Path(binary).name} shard {index}/{count}: "
                  f"{counts['passed']} passed, {counts['skipped']} skipped, {counts['failed']} failed "
                  f"in {seconds:.0f} s{' (crashed or timed out: ' + str(log) + ')' if crashed else ''}", flush=True)
    # A case no shard reported (its shard died before reaching it) counts as failed.
    for name in order:
        status.setdefault(name, "failed")
    with open(args.out / "tests.log", "w") as f:
        for log in sorted(logs):
            f.write(f"==== {log.name}\n{log.read_text(errors='replace')}\n")
        summary = summarize(status, order, time.monotonic() - t0, problems)
        f.write(summary)
    print(summary, end="")
    return 0 if all(v != "failed" for v in status.values()) else 8


def summarize(status, order, seconds, problems):
    total = len(order)
    failed = [n for n in order if status[n] == "failed"]
    skipped = [n for n in order if status[n] == "skipped"]
    pct = 100 if not failed else int(100 * (total - len(failed)) / max(total, 1))
    lines = ["", f"{pct}% tests passed, {len(failed)} tests failed out of {total}",
             f"Total Test time (real) = {seconds:.2f} sec (run_test_shards.py: shards of one process each)"]
    if skipped:
        lines += ["", "The following tests did not run:"]
        lines += [f"\t{order[n]:4d} - {n} (Skipped)" for n in skipped]
    if failed:
        lines += ["", "The following tests FAILED:"]
        lines += [f"\t{order[n]:4d} - {n} (Failed)" for n in failed]
    if problems:
        lines += ["", "Shards that crashed or timed out (their logs):"] + [f"\t{p}" for p in problems]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
