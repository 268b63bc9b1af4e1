"""scripts/device-run's verdict step (--jobs K), on the CPU: one verdict a
test, the lone rerun's where a test failed beside others, and the FAIL
lines such a test printed beside others listed after the summary (a race
once showed only beside other processes: fifteenth session)."""
import subprocess
import sys

from conftest import REPO


def verdict_script():
    """The Python the script runs for the verdict (its heredoc)."""
    lines = (REPO / "scripts" / "device-run").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "# One verdict a test" in l)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("  python3 - ")) + 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "PY")
    return "\n".join(lines[start:end])


def run_verdict(parts):
    return subprocess.run([sys.executable, "-c", verdict_script(), str(parts)], capture_output=True, text=True)


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
