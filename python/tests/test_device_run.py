"""scripts/device-run on the CPU. Its verdict step (--jobs K): one verdict a
test, the lone rerun's where a test failed beside others, and the FAIL
lines such a test printed beside others listed after the summary (a race
once showed only beside other processes: fifteenth session). Its
--skip-passed step: what earlier logs report as passed or skipped leaves
the selection, nothing else does."""
import json
import subprocess
import sys

from conftest import REPO


def heredoc_after(marker):
    """The Python the script runs (a heredoc) first after the line with `marker`."""
    lines = (REPO / "scripts" / "device-run").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if marker in l)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("  python3 - ")) + 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "PY")
    return "\n".join(lines[start:end])


def run_verdict(parts):
    script = heredoc_after("# One verdict a test")
    return subprocess.run([sys.executable, "-c", script, str(parts)], capture_output=True, text=True)


def run_skip_passed(tmp_path, selected, logs):
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps({"tests": [{"name": n} for n in selected]}))
    paths = []
    for i, text in enumerate(logs):
        paths.append(tmp_path / f"earlier-{i}.log")
        paths[-1].write_text(text)
    script = heredoc_after("skip_done() {")
    r = subprocess.run([sys.executable, "-c", script, str(selection), *map(str, paths)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), r.stderr


def test_a_test_that_passed_only_alone_shows_what_it_reported_beside_others(tmp_path):
    (tmp_path / "ctest-0.log").write_text(
        "1/2 Test #1: racy_mp_n2 .....***Failed    2.29 sec\n"
        "2/2 Test #2: calm_mp_n2 .....   Passed    1.00 sec\n")
    (tmp_path / "full-0.log").write_text(
        "1/2 Test #1: racy_mp_n2 .....***Failed    2.29 sec\n"
        "[racy mp n2 rank 0] starting\n"
        "FAIL c.c:196: [racy mp n2 rank 0] residualOut: 128 wrong element(s)\n"
        "FAIL gpu_world.c:881: [racy mp n2] rank 0: 1 failed check(s)\n"
        "2/2 Test #2: calm_mp_n2 .....   Passed    1.00 sec\n"
        "FAIL not this test's line\n")
    (tmp_path / "ctest-again.log").write_text("1/1 Test #1: racy_mp_n2 .....   Passed    2.07 sec\n")
    r = run_verdict(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "100% tests passed, 0 tests failed out of 2" in r.stdout
    alone = r.stdout.split("Passed only alone", 1)[1]
    assert "racy_mp_n2: beside others FAIL c.c:196: [racy mp n2 rank 0] residualOut: 128 wrong element(s)" in alone
    assert "calm_mp_n2" not in alone


def test_a_test_that_fails_alone_too_is_failed_and_not_listed_as_passed_alone(tmp_path):
    (tmp_path / "ctest-0.log").write_text("1/1 Test #1: broken_mp_n2 .....***Failed    1.00 sec\n")
    (tmp_path / "full-0.log").write_text("1/1 Test #1: broken_mp_n2 .....***Failed    1.00 sec\nFAIL x.c:1: broken\n")
    (tmp_path / "ctest-again.log").write_text("1/1 Test #1: broken_mp_n2 .....***Failed    1.00 sec\n")
    r = run_verdict(tmp_path)
    assert r.returncode == 1
    assert "0% tests passed, 1 tests failed out of 1" in r.stdout
    assert "\tbroken_mp_n2" in r.stdout.split("The following tests FAILED:", 1)[1]
    assert "Passed only alone" not in r.stdout


def test_skip_passed_leaves_out_passed_and_skipped_tests_only(tmp_path):
    selected = ["symm_pattern_mp_n2_shared", "bench_smoke_procs_symmetric-recv_n2_shared",
                "coll_bad_input_all_n2_shared", "coll_timeout_mp_n2_shared", "coll_matrix_mp_n2_shared",
                "symm_leaks_mp_n2_shared"]
    left, said = run_skip_passed(tmp_path, selected, [
        # A CTest log: passed (a hyphen in the name), skipped by design, stopped at the budget, failed.
        " 1/4 Test  #22: symm_pattern_mp_n2_shared .........   Passed    9.51 sec\n"
        "2/2 Test #617: bench_smoke_procs_symmetric-recv_n2_shared ...   Passed    6.92 sec\n"
        " 8/43 Test #158: coll_bad_input_all_n2_shared ....***Skipped   0.55 sec\n"
        "22/22 Test #378: coll_timeout_mp_n2_shared .........***Timeout   1.11 sec\n"
        " 4/4 Test #95: coll_matrix_mp_n2_shared ..........***Failed   14.24 sec\n",
        # A raw-output page under docs/perf: prose around the fenced CTest lines.
        "## Call 4\n\nPassed is said here of symm_leaks_mp_n2_shared in prose only.\n```\n"
        "21/21 Test #374: coll_timeout_mp_n2_shared ..........***Timeout  20.40 sec\n```\n",
    ])
    assert left == ["coll_timeout_mp_n2_shared", "coll_matrix_mp_n2_shared", "symm_leaks_mp_n2_shared"]
    assert "3 of the 6 selected tests passed" in said and "3 left" in said


def test_skip_passed_with_every_test_passed_leaves_nothing(tmp_path):
    left, said = run_skip_passed(tmp_path, ["a_n2_shared"], ["1/1 Test #1: a_n2_shared ...   Passed    1.00 sec\n"])
    assert left == []
    assert "0 left" in said
