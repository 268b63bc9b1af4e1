"""scripts/perf-tables (the benchmarks' output as markdown tables) and
scripts/device-measure (the multi-GPU measurement script), on the CPU.

Samples: docs/perf/sweep-2xH200-2026-11-22.txt is a real capture of
symm_bench (two H200s, NCCL in the same run); python/tests/data/ holds
outputs formatted exactly as symm_bench (--algos-for, SYMM_TIMELINE=1),
fused_bench and device_bench print them and the JSON the PyTorch
benchmarks write, with made-up numbers; *_window.txt are symm_bench,
device_bench and eager_bench with NCCL's window column (--vs-nccl
--nccl-window), made up in the same way; eager_bench.txt and
eager_loop_{nccl,symm}.json are real captures (4 x H200, 2026-11-26, the
library before the two-rank eager stall was fixed; eager_bench.txt with the
per-rank GPU lines it prints since added).
"""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

DATA = REPO / "python" / "tests" / "data"
CAPTURE = REPO / "docs" / "perf" / "sweep-2xH200-2026-11-22.txt"
SCRIPT = REPO / "scripts" / "perf-tables"


def load_perf_tables():
    loader = importlib.machinery.SourceFileLoader("perf_tables", str(SCRIPT))
    spec = importlib.util.spec_from_loader("perf_tables", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


pt = load_perf_tables()


def section(md, heading):
    """The text of the first section whose heading starts with `heading`."""
    start = md.index(heading)
    end = md.find("\n####", start + 1)
    return md[start:end if end != -1 else len(md)]


def test_sizes_and_numbers():
    assert [pt.human(n) for n in (8, 1000, 65536, 1 << 20, 3 << 20, 1 << 30)] == \
        ["8 B", "1000 B", "64 KiB", "1 MiB", "3 MiB", "1 GiB"]
    assert pt.num("N/A") is None and pt.num("-") is None and pt.num("2.5") == 2.5
    assert [pt.fmt_us(v) for v in (2.561, 123.45, 12345.6, None)] == ["2.56", "123.5", "12346", "—"]


def test_real_capture_gives_the_documented_table():
    """The capture behind docs/PERFORMANCE.md's tables comes out in their
    format, with the same numbers."""
    md = pt.render([str(CAPTURE)], full=True)
    runs = pt.parse_symm_bench(CAPTURE.read_text())
    assert len(runs) == 18 and all(r.status and "0 wrong elements: OK" in r.status for r in runs)
    assert runs[0].nccl == "2.28.3" and runs[0].ranks == 2 and runs[0].gpus == ["NVIDIA H200"] * 2
    assert len(runs[0].tables[0].rows) == 28
    # docs/PERFORMANCE.md, "All-reduce, eager, one process per GPU, plain (staged) buffers":
    docs = (REPO / "docs" / "PERFORMANCE.md").read_text()
    for row in ("| 8 B | 4.32 | 0.00 | 4.61 | 0 | 10.33 | 0.00 | 2.39 |",
                "| 1 GiB | 3223.4 | 333.11 | 3218.6 | 0 | 3270.8 | 328.28 | 1.01 |"):
        assert row in docs and row in md
    ab = section(md, "#### All-reduce, 2 ranks, eager, staged buffers")
    assert "`build/c_tests/bench/symm_bench --vs-nccl -c allreduce`" in ab
    assert "2026-11-22 05:23:51 UTC; 2 × NVIDIA H200; 2 ranks, eager, staged buffers" in ab
    assert "NCCL 2.28.3" in ab
    assert "| 1 GiB | 3270.8 | 3223.4 | 1.01 | `default` |" in ab
    below = section(md, "#### Rows below 1.0× NCCL")
    assert "| Send/recv (grouped ring, both directions at once), 2 ranks, graph-replayed, staged buffers | `default` | 1 GiB | 0.64 |" in below
    assert "All-gather" not in below  # every all-gather row beats NCCL in that run
    assert "WRONG" not in md


def test_algorithms_side_by_side_and_timeline():
    md = pt.render([str(DATA / "symm_bench_algos.txt")])
    ab = section(md, "#### All-reduce, 4 ranks, graph-replayed, symmetric buffers")
    head = next(line for line in ab.splitlines() if line.startswith("| size"))
    assert head == ("| size | NCCL (µs) | `classic` (µs) | NCCL / `classic` | `auto` (µs) | NCCL / `auto` | "
                    "`twoshot+push` (µs) | NCCL / `twoshot+push` | best |")
    # NCCL's time over each algorithm's; the best ratio named.
    assert "| 1 GiB | 3350.0 | 4400.0 | 0.76 | 3600.0 | 0.93 | 3150.0 | 1.06 | `twoshot+push` |" in ab
    assert "| 64 KiB | 8.10 | 6.90 | 1.17 | 6.80 | 1.19 | 9.10 | 0.89 | `auto` |" in ab
    below = section(md, "#### Rows below 1.0× NCCL")
    assert "| `auto` | 1 GiB | 0.93 |" in below and "| `p2p` |" not in below
    tl = section(md, "#### Per-phase timeline")
    assert "SYMM_TIMELINE=1" in tl
    assert "| All-reduce | symmetric | `twoshot+push` | 1 GiB | 128 | 3087.0 | start 0.4/1.1 copy-in 812.0/840.2" in tl
    assert "| Send/recv | symmetric | `p2p` | 1 GiB | — | — | none (LL packets or send/recv: no synced kernel) |" in tl
    # The timeline run has no A/B table of its own.
    assert md.count("#### All-reduce, 4 ranks") == 1


def test_cut_off_and_wrong_results_are_flagged(tmp_path):
    lines = (DATA / "symm_bench_algos.txt").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  1073741824"))
    cut = lines[:first]  # killed before the 1 GiB row of the first table
    bad = [line.replace("       0      6.97", "      17      6.97") for line in cut]
    (tmp_path / "cut.log").write_text("\n".join(bad) + "\n")
    md = pt.render([str(tmp_path / "cut.log")])
    assert "cut off before its end" in md
    ab = section(md, "#### All-reduce, 4 ranks, graph-replayed, symmetric buffers")
    assert "| 1 MiB | 14.60 | 13.10 | 1.11 | `classic` |" in ab and "| 1 GiB |" not in ab
    wrong = section(md, "#### WRONG RESULTS")
    assert "| `classic` | 64 KiB | 17 | 0 |" in wrong


def test_without_nccl_the_ratio_is_to_the_first_algorithm(tmp_path):
    text = (DATA / "symm_bench_algos.txt").read_text()
    lines = []
    for line in text.splitlines():
        if pt.ROW_RE.match(line):
            line = "  " + "  ".join(line.split()[:13])  # no NCCL columns
        lines.append(line.replace(", NCCL 2.28.3", ""))
    (tmp_path / "no_nccl.log").write_text("\n".join(lines) + "\n")
    md = pt.render([str(tmp_path / "no_nccl.log")])
    ab = section(md, "#### All-reduce, 4 ranks, graph-replayed, symmetric buffers")
    assert "no NCCL columns" in ab
    assert "| size | `classic` (µs) | classic / `classic` | `auto` (µs) | classic / `auto` |" in ab
    assert "| 1 GiB | 4400.0 | 1.00 | 3600.0 | 1.22 | 3150.0 | 1.40 | `twoshot+push` |" in ab
    assert "Rows below" not in md


def test_nccl_window_column_beside_nccl():
    """symm_bench --nccl-window: NCCL's window-registered column beside its
    ordinary one, and every ratio of the A/B table to the faster of the two."""
    text = (DATA / "symm_bench_window.txt").read_text()
    runs = pt.parse_symm_bench(text)
    assert len(runs) == 1 and runs[0].nccl_window and runs[0].status == "12 row(s), 0 wrong elements: OK"
    first = runs[0].tables[0].rows[0]
    assert (first["nccl_us"], first["win_us"], first["win_busbw"], first["win_ratio"]) == (9.0, 6.0, 10.92, 0.75)
    assert first["spreads"][3] == (5.94, 6.06)  # the window's runs
    md = pt.render([str(DATA / "symm_bench_window.txt")], full=True)
    ab = section(md, "#### All-reduce, 2 ranks, eager, staged buffers")
    assert "NCCL 2.28.3 with its window column (`--nccl-window`" in ab
    head = next(line for line in ab.splitlines() if line.startswith("| size"))
    assert head == ("| size | NCCL (µs) | NCCL win (µs) | `classic` (µs) | best NCCL / `classic` | `auto` (µs) | "
                    "best NCCL / `auto` | best |")
    # The window is faster at 64 KiB and 8 MiB, NCCL's ordinary column at 1 GiB.
    assert "| 64 KiB | 9.00 | 6.00 | 8.00 | 0.75 | 6.50 | 0.92 | `auto` |" in ab
    assert "| 8 MiB | 60.00 | 58.00 | 70.00 | 0.83 | 52.00 | 1.12 | `auto` |" in ab
    assert "| 1 GiB | 3300.0 | 3400.0 | 4400.0 | 0.75 | 3150.0 | 1.05 | `auto` |" in ab
    ag = section(md, "#### All-gather, 2 ranks, eager, staged buffers")
    assert "| 64 KiB | 7.00 | 5.50 | 6.00 | 0.92 | 5.00 | 1.10 | `auto` |" in ag
    below = section(md, "#### Rows below 1.0× NCCL")
    assert "| table | algorithm | size | best NCCL / symmcomm |" in below
    # Below the window only (9.00 / 6.50 = 1.38 against NCCL's ordinary column).
    assert "| All-reduce, 2 ranks, eager, staged buffers | `auto` | 64 KiB | 0.92 |" in below
    full = section(md, "##### All-reduce, 2 ranks, eager, staged buffers: `classic`")
    assert ("| size | symmcomm (µs) | busbw (GB/s) | in place (µs) | #wrong | NCCL (µs) | NCCL busbw | NCCL / symmcomm | "
            "NCCL win (µs) | NCCL win busbw | NCCL win / symmcomm | best NCCL / symmcomm |") in full
    assert "| 64 KiB | 8.00 | 8.19 | 8.08 | 0 | 9.00 | 7.28 | 1.12 | 6.00 | 10.92 | 0.75 | 0.75 |" in full
    assert "| 1 GiB | 4400.0 | 244.03 | 4444.0 | 0 | 3300.0 | 325.38 | 0.75 | 3400.0 | 315.81 | 0.77 | 0.75 |" in full
    assert "WRONG" not in md and "Unsteady" not in md and "cut off" not in md
    # Without the window nothing changes: the plain NCCL header and ratios.
    plain = pt.render([str(DATA / "symm_bench_algos.txt")])
    assert "NCCL win" not in plain and "best NCCL" not in plain


def test_nccl_window_spread_is_its_own_column(tmp_path):
    lines = (DATA / "symm_bench_window.txt").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("#  runs: "))
    lines[at] = lines[at].replace("NCCL window 5.94-6.06 us", "NCCL window 5.94-19.00 us")
    (tmp_path / "spread.log").write_text("\n".join(lines) + "\n")
    u = section(pt.render([str(tmp_path / "spread.log")]), "#### Unsteady rows")
    rows = [line for line in u.splitlines() if line.startswith("| ") and "64 KiB" in line]
    assert rows == ["| All-reduce, 2 ranks, eager, staged buffers | `classic` | 64 KiB | NCCL window | 5.94 | 19.00 |"], u


def test_declined_windows_are_flagged(tmp_path):
    """NCCL may hand out NULL windows (no cuMem, no peer mappings): the
    benchmarks say so in their header and the tables' captions repeat it."""
    note = ("# note: NCCL declined 2 of 4 window registrations (ncclCommWindowRegister gave a NULL window): "
            "the NCCL window column times NCCL's ordinary path there")
    flagged = ("**NCCL declined 2 of 4 window registrations (ncclCommWindowRegister gave a NULL window): "
               "the NCCL window column times NCCL's ordinary path there.**")
    for name, after in (("symm_bench_window.txt", "# NCCL (window): "), ("device_bench_window.txt", "# graph: ")):
        lines = (DATA / name).read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(after))
        lines.insert(at + 1, note)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        md = pt.render([str(tmp_path / name)])
        assert flagged in md, md
        assert "share" not in md.lower() and "FAILED" not in md
    assert "declined" not in pt.render([str(DATA / "symm_bench_window.txt"), str(DATA / "device_bench_window.txt")])


def test_nccl_window_in_device_and_eager_tables():
    md = pt.render([str(DATA / "device_bench_window.txt")])
    one = section(md, "#### Device API: one-shot all-reduce")
    assert ("| size (B) | example (µs) | symmAllReduce (µs) | NCCL (µs) | NCCL window (µs) | symmAllReduce / example | "
            "NCCL / example | NCCL window / example | #wrong |") in one
    assert "| 32 KiB | 4.40 | 3.30 | 6.90 | 5.20 | 0.75 | 1.57 | 1.18 | 0 |" in one
    rms = section(md, "#### Device API: all-reduce + residual add + RMSNorm")
    assert "| 32 KiB | 4 | 4096 | 5.00 | 6.40 | 9.90 | 8.20 | 1.28 | 1.98 | 1.64 | 0 |" in rms
    md = pt.render([str(DATA / "eager_bench_window.txt")])
    c = section(md, "#### C API: eager all-reduce loop")
    assert "| NCCL / this (median wall, same buffer use) | best NCCL / this (the faster of nccl and nccl-win" in c
    assert "| nccl-same | 10.4/10.5/11.7 | 10.3/10.4/10.9 | 37.7/63.3/1523.1 | 1.00 | - | 0 |" in c
    assert "| nccl-win-rotating | 8.1/8.2/8.6 | 7.2/7.3/7.7 | 26.3/31.0/44.4 | 1.28 | 1.00 | 0 |" in c
    assert "| symm-same | 5.9/6.0/6.0 | 4.6/4.6/4.8 | 26.0/28.1/33.7 | 1.75 | 1.33 | 0 |" in c
    assert "cut off" not in md and "FAILED" not in md


def test_device_api_tables():
    md = pt.render([str(DATA / "device_bench.txt")])
    one = section(md, "#### Device API: one-shot all-reduce")
    assert "| size (B) | example (µs) | symmAllReduce (µs) | NCCL (µs) | symmAllReduce / example | NCCL / example | #wrong |" in one
    assert "| 32 KiB | 4.40 | 3.30 | 6.90 | 0.75 | 1.57 | 0 |" in one
    assert "`device_bench mp --nranks=4 --vs-nccl --maxbytes=64K --factor=64`" in one and "NCCL 2.28.3" in one
    rms = section(md, "#### Device API: all-reduce + residual add + RMSNorm")
    assert "| 32 KiB | 4 | 4096 | 5.00 | 6.40 | 9.90 | 1.28 | 1.98 | 0 |" in rms
    assert "cut off" not in md and "FAILED" not in md


def test_fused_ops_merged_with_pytorch():
    md = pt.render([str(DATA / "fused_bench.txt"), str(DATA / "fused_torch.json")])
    fused = section(md, "#### Fused matmul ops")
    assert ("| all-gather-matmul | bf16 | 4 | 32768 × 8192 × 8192 | 1 | 690.5 | 560.2 | 555.0 | 637.4 | 556.7 | "
            "1.24 | 1.08 |") in fused
    assert "| matmul-reduce-scatter | bf16 | 4 | 32768 × 8192 × 16384 | 2 | 650.0 | 560.0 | 550.0 | — | — | 1.18 | — |" in fused
    assert "fused_bench mp --nranks=4 --dtype=bf16 --vs-nccl" in fused
    rest = section(md, "#### PyTorch's fused ops")
    assert "| all-gather-matmul | e4m3 | 4 | 32768 × 8192 × 8192 | 1099.5 | 956.1 | 1.15 | 3.00e-02 |" in rest
    assert "PyTorch 2.11.0, NCCL 2.28.3; symmetric-memory backend CUDA" in md


def test_tp_mlp_with_and_without_the_preload():
    md = pt.render([str(DATA / "tp_mlp_preloaded.json"), str(DATA / "tp_mlp_nccl.json")])
    t = section(md, "#### PyTorch tensor-parallel MLP step")
    assert "| 16 | 200.0 | 310.0 | 290.0 | 1.07 | 250.0 | 231.0 | 1.08 | 8.1e-07 |" in t
    assert "Without: `torchrun" in t and "With: `LD_PRELOAD=/x/libsymmcomm_nccl.so torchrun" in t
    # One run alone makes no table.
    assert "tensor-parallel" not in pt.render([str(DATA / "tp_mlp_nccl.json")])
    # tp_mlp_bench.py's own "table" mode agrees (it needs no torch for that).
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "tp_mlp_bench.py"), "table",
                          str(DATA / "tp_mlp_nccl.json"), str(DATA / "tp_mlp_preloaded.json")],
                         capture_output=True, text=True, check=True).stdout
    assert "| 16 | 200.0 | 310.0 | 290.0 | 1.07 | 250.0 | 231.0 | 1.08 | 8.1e-07 |" in out


def test_eager_loops_c_and_pytorch():
    md = pt.render([str(DATA / "eager_loop_symm.json"), str(DATA / "eager_bench.txt"), str(DATA / "eager_loop_nccl.json")])
    c = section(md, "#### C API: eager all-reduce loop")
    assert "`eager_bench mp --nranks=2 --vs-nccl`" in c and "2 ranks on NVIDIA H200" in c
    assert "| symm-same | 5.9/6.0/6.0 | 4.6/4.6/4.8 | 26.0/28.1/33.7 | 1.75 | 0 |" in c
    t = section(md, "#### PyTorch eager loops at 2 ranks")
    lines = [line for line in t.splitlines() if line.startswith("| ")]
    # NCCL first (the ratios' reference), whatever the order given.
    assert lines[1].startswith("| nccl | 2 | all_reduce 256 KiB | 37.9 / 39.1 / 48.6 |")
    # The stall, as captured: 0.14x NCCL at the median, 968 us per call at worst.
    assert "| symm-symm | 2 | all_reduce 256 KiB | 32.0 / 272.3 / 968.2 | 29.2 / 36.7 / 336.1 | 17453 | 0.14 | yes |" in t
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "eager_loop_bench.py"), "table",
                          str(DATA / "eager_loop_nccl.json"), str(DATA / "eager_loop_symm.json")],
                         capture_output=True, text=True, check=True).stdout
    assert "| 32.0 / 272.3 / 968.2 |" in out


def test_unsteady_rows_from_the_runs_spread(tmp_path):
    """symm_bench --runs prints each row's spread; rows whose slowest run is
    over 1.5x the fastest are listed, so a stall cannot hide in a median."""
    text = CAPTURE.read_text().splitlines()
    at = next(i for i, line in enumerate(text) if pt.ROW_RE.match(line))
    text.insert(at + 1, "#  runs: 3 of 1000 calls; out-of-place 5.10-5.30 us, in-place 5.00-91.00 us, NCCL 8.00-8.10 us")
    log = tmp_path / "runs.log"
    log.write_text("\n".join(text) + "\n")
    md = pt.render([str(log)])
    u = section(md, "#### Unsteady rows")
    rows = [line for line in u.splitlines() if line.startswith("| ") and "in place" in line]
    assert len(rows) == 1 and "| 5.00 | 91.00 |" in rows[0], u
    assert "out of place" not in u and "| NCCL |" not in u
    assert "Unsteady" not in pt.render([str(CAPTURE)])


def test_command_line(tmp_path):
    machine = tmp_path / "machine.md"
    machine.write_text("Machine: 4 × NVIDIA H200.\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--title", "T", "--machine", str(machine),
                        str(DATA / "device_bench.txt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# T\n") and "Machine: 4 × NVIDIA H200." in r.stdout
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.log")], capture_output=True, text=True)
    assert r.returncode == 2 and "no such file" in r.stderr


def test_torch_benchmarks_compile():
    for name in ("fused_torch_bench.py", "tp_mlp_bench.py", "eager_loop_bench.py"):
        src = (REPO / "tests" / "torch" / name).read_text()
        compile(src, name, "exec")


SHELL_SCRIPTS = ["device-measure", "device-run", "perf-sweep"]


@pytest.mark.parametrize("name", SHELL_SCRIPTS)
def test_shell_scripts_parse(name):
    subprocess.run(["bash", "-n", str(REPO / "scripts" / name)], check=True)


def test_device_measure_is_shellcheck_clean():
    sc = shutil.which("shellcheck")
    if not sc:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run([sc, str(REPO / "scripts" / "device-measure")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


BENCHES = [REPO / "build" / "c_tests" / "bench" / b for b in ("symm_bench", "fused_bench", "device_bench", "eager_bench")]


@pytest.mark.parametrize("args", [["--gpus", "4", "all"], ["--smoke"], ["--gpus", "2", "sweep:2:staged", "device"]])
def test_device_measure_dry_run(tmp_path, args):
    """Every step of the tiers, printed; the C benchmarks run with their exact
    arguments (without a GPU they check them and stop), so a bad option in
    the script fails here rather than on the GPU machine."""
    missing = [str(b) for b in BENCHES if not os.access(b, os.X_OK)]
    if missing:
        pytest.skip(f"the benchmarks are not built ({', '.join(missing)}; scripts/setup builds them)")
    env = dict(os.environ, SYMM_MEASURE_TMP=str(tmp_path), OUT=str(tmp_path / "out"))
    r = subprocess.run([str(REPO / "scripts" / "device-measure"), "--dry-run", *args], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [line for line in summary.splitlines() if line.startswith("-- ")]
    assert steps and all(": ok" in line for line in steps), summary
    names = [line.split(":")[0][3:] for line in steps]
    if args == ["--smoke"]:
        assert names == ["build", "eager_c_n2", "eager_torch_n1_nccl", "eager_torch_n1_symm-auto",
                         "eager_torch_n1_symm-symm", "suite_smoke", "sweep_n2_staged_eager", "sweep_n2_staged_graph", "timeline_n2_staged",
                         "sweep_n2_symmetric_eager", "sweep_n2_symmetric_graph", "timeline_n2_symmetric",
                         "fused_n2_bf16", "fused_n2_e4m3", "fused_torch_n1", "device_n2", "tp_mlp_n1_nccl",
                         "tp_mlp_n1_preloaded"]
        log = (tmp_path / "symmcomm-measure-logs" / "measure" / "sweep_n2_staged_eager.log").read_text()
        assert "--nccl-lib" in log and "SYMM_NCCL_MODE=symm" in log
    elif args[-1] == "all":
        assert "suite_n4" in names and "sweep_n4_symmetric_graph" in names and "timeline_n4_staged" in names
        assert "fused_n4_e4m3" in names and "device_n2" in names and "device_n4" in names
        assert "tp_mlp_n4_preloaded" in names
        assert names[1:5] == ["eager_c_n2", "eager_torch_n2_nccl", "eager_torch_n2_symm-auto", "eager_torch_n2_symm-symm"]
        assert "eager_c_n4" in names and "eager_torch_n4_symm-symm" in names
    else:
        assert names == ["build", "sweep_n2_staged_eager", "sweep_n2_staged_graph", "timeline_n2_staged", "device_n2"]
    # NCCL's window column beside its ordinary one wherever a benchmark has
    # it (smoke runs too: the stand-in serves the window calls); fused_bench
    # has none, and the timeline runs have no NCCL at all.
    logs = tmp_path / "symmcomm-measure-logs" / "measure"
    for name in names:
        command = (logs / f"{name}.log").read_text().splitlines()[0]
        has_window = "--nccl-window" in command
        assert has_window == name.startswith(("sweep_", "device_", "eager_c_")), command
    for f in ("tables.md", "tables-full.md", "measure.tgz"):
        assert (tmp_path / "out" / f).is_file()


def test_device_measure_refuses_more_ranks_than_gpus(tmp_path):
    env = dict(os.environ, SYMM_MEASURE_TMP=str(tmp_path), OUT=str(tmp_path / "out"))
    r = subprocess.run([str(REPO / "scripts" / "device-measure"), "--dry-run", "--gpus", "2", "sweep:4"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "sweep:4: not run (needs 4 GPUs, the machine has 2)" in (tmp_path / "out" / "summary.txt").read_text()


def test_data_files_are_what_the_tests_say():
    names = ("fused_torch.json", "tp_mlp_nccl.json", "tp_mlp_preloaded.json", "eager_loop_nccl.json", "eager_loop_symm.json")
    docs = [json.loads((DATA / n).read_text()) for n in names]
    assert [d["kind"] for d in docs] == ["fused_torch", "tp_mlp", "tp_mlp", "eager_loop", "eager_loop"]
    assert [d["path"] for d in docs[3:]] == ["nccl", "symm-symm"]
    assert CAPTURE.is_file()
