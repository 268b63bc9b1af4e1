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
per-rank GPU lines it prints since added). data/host/ holds what
scripts/device-measure's tier "host" leaves (made-up numbers, the formats
exactly as eager_bench --nranks=1 --sizes / --op=sendrecv, with the step
line device-measure writes first, host_cost_bench.py and
eager_loop_bench.py --bytes LIST print them).
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


def test_env_ab_pairs_the_defaults_with_the_setting(tmp_path):
    """scripts/device-measure's tier ab: the defaults' process and the one
    with a variable set (steps ab_nN_CLASS_KIND_base / _env) become one
    table, NCCL's faster column from the defaults' process."""
    text = (DATA / "symm_bench_window.txt").read_text()
    base = tmp_path / "ab_n2_staged_eager_base.log"
    base.write_text("== step ab_n2_staged_eager_base: env ...\n" + text)
    changed = text.replace("# environment: NCCL_NVLS_ENABLE=0", "# environment: NCCL_NVLS_ENABLE=0 SYMM_P2P_RING_BYTES=4194304")
    row = "       65536         32768      bf16     sum      -1      8.00"
    assert changed.count(row) == 1
    other = tmp_path / "ab_n2_staged_eager_env.log"
    other.write_text("== step ab_n2_staged_eager_env: env ...\n" + changed.replace(row, row[:-4] + "6.40"))
    assert pt.parse_symm_bench(base.read_text())[0].step == "ab_n2_staged_eager_base"
    md = pt.render([str(base), str(other)])
    ab = section(md, "#### A/B: the defaults against `SYMM_P2P_RING_BYTES=4194304`, 2 ranks, eager, staged buffers")
    assert ("| collective | size | best NCCL (µs) | defaults (µs) | `SYMM_P2P_RING_BYTES=4194304` (µs) | "
            "best NCCL / defaults | best NCCL / `SYMM_P2P_RING_BYTES=4194304` | defaults / it |") in ab
    assert "| All-reduce | 64 KiB | 6.00 | 8.00 | 6.40 | 0.75 | 0.94 | 1.25 |" in ab
    assert "| All-reduce | 1 GiB | 3300.0 | 4400.0 | 4400.0 | 0.75 | 0.75 | 1.00 |" in ab
    assert md.index("#### A/B: the defaults") < md.index("#### All-reduce, 2 ranks")
    # Without its partner a step makes no A/B table.
    assert "#### A/B" not in pt.render([str(base)])
    # A second ab tier at the same rank count in the call (steps ab2_n2_...)
    # pairs on its own.
    second = {}
    for side, path in (("base", base), ("env", other)):
        second[side] = tmp_path / f"ab2_n2_staged_eager_{side}.log"
        second[side].write_text(path.read_text().replace("ab_n2_", "ab2_n2_", 1)
                                .replace("SYMM_P2P_RING_BYTES=4194304", "SYMM_LL_MAX_BYTES=1048576"))
    both = pt.render([str(base), str(other), str(second["base"]), str(second["env"])])
    assert both.count("#### A/B: the defaults against") == 2
    assert "#### A/B: the defaults against `SYMM_LL_MAX_BYTES=1048576`, 2 ranks, eager, staged buffers" in both


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


def test_moe_dispatch_combine_table():
    """moe_a2a_bench.py's JSON (made-up numbers; one wrong round trip) in
    perf-tables and in the script's own table mode."""
    md = pt.render([str(DATA / "moe_a2a.json")])
    t = section(md, "#### MoE dispatch / combine, 4 ranks")
    assert "| 1024 | 0 | dispatch | 400.0 (380.0-440.0) | 200.0 (190.0-220.0) |" in t
    assert "| 2.00 | 2.11 | 1.90 | 2.00 | ok |" in t, "NCCL eager over each symmcomm column"
    assert "| 1024 | 1.2 | both |" in t and t.count("WRONG") == 3, "a wrong round trip marks its rows"
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "moe_a2a_bench.py"), "table",
                          str(DATA / "moe_a2a.json")], capture_output=True, text=True, check=True).stdout
    assert "| 1024 | 0 | combine | 300.0 (285.0-330.0) |" in out


def test_allreduce_torch_table():
    """allreduce_torch_bench.py's JSON (made-up numbers: a path PyTorch
    refused, a wrong result) in perf-tables and in the script's own table."""
    md = pt.render([str(DATA / "allreduce_torch.json")])
    t = section(md, "#### All-reduce on symmetric memory, 4 ranks")
    # NCCL over symmcomm 2.00, the faster PyTorch kernel (one-shot, 9.0) over symmcomm 1.50.
    assert "| 64 KiB | 12.0 (11.0-13.0) | 9.0 (8.0-10.0) | 15.0 (14.0-16.0) | 6.0 (5.5-6.5) | 2.00 | 1.50 | ok |" in t
    assert "| 1 GiB | 4520.0 (4500.0-4540.0) | - | failed | 5013.0 (5000.0-5020.0) | 0.90 | - | WRONG |" in t
    assert "- 1 GiB two_shot: RuntimeError: made-up refusal" in t
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "allreduce_torch_bench.py"), "table",
                          str(DATA / "allreduce_torch.json")], capture_output=True, text=True, check=True).stdout
    assert "| 64 KiB |" in out and "best torch / symmcomm" in out


HOST = DATA / "host"


def host_inputs():
    return sorted(str(p) for p in HOST.iterdir())


def table_rows(md):
    """{first cell: [other cells]} of the markdown table rows in md."""
    out = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| path"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[cells[0]] = cells[1:]
    return out


def test_host_table_from_the_host_tier():
    """The tier "host": one table, a row per path, a column per size, the
    targets and whether each is met."""
    md = pt.render(host_inputs())
    assert md.startswith("#### Host CPU per call (µs, median of runs), world size 1")  # first: it says what is met
    host = section(md, "#### Host CPU per call (µs, median of runs), world size 1")
    head = next(line for line in host.splitlines() if line.startswith("| path"))
    assert head == "| path | 8 B | 4 KiB | 256 KiB | 4 MiB | target (host CPU per call) | met |"
    rows = table_rows(host)
    assert list(rows) == [
        "`symmAllReduce` (C API; one rank launches nothing, as NCCL)",
        "`symmAllReduce` (C API), 2 ranks sharing the GPU: a kernel per call",
        "`cuLaunchKernel` floor, 2 ranks sharing the GPU (488 bytes of arguments)", "`ncclAllReduce`, NCCL", "`ncclAllReduce`, drop-in, `SYMM_NCCL_MODE=symm`",
        "`ncclAllReduce`, drop-in, `SYMM_NCCL_MODE=auto`", "grouped `symmSend`/`symmRecv` (C API)",
        "grouped `ncclSend`/`ncclRecv`, NCCL", "grouped `ncclSend`/`ncclRecv`, drop-in, `SYMM_NCCL_MODE=symm`",
        "grouped `ncclSend`/`ncclRecv`, drop-in, `SYMM_NCCL_MODE=auto`", "Python `Communicator.all_reduce`",
        "Python `SymmLibrary.symmAllReduce` (the package's wrapper)", "Python ctypes `symmAllReduce` (raw call)",
        "PyTorch `dist.all_reduce`, NCCL", "PyTorch `dist.all_reduce`, preloaded drop-in, `SYMM_NCCL_MODE=symm`",
        "PyTorch `dist.all_reduce`, preloaded drop-in, `SYMM_NCCL_MODE=auto`"]
    # symmAllReduce from the run beside the real NCCL; 3.2 µs at 4 MiB is over its 3 µs.
    assert rows["`symmAllReduce` (C API; one rank launches nothing, as NCCL)"] == [
        "2.2", "2.3", "2.4", "3.2", "≤ 3 µs", "**no**: 4 MiB (3.2 > 3.0)"]
    # The kernel path: two ranks sharing the GPU, only the symm rows and the launch floor of that run.
    assert rows["`symmAllReduce` (C API), 2 ranks sharing the GPU: a kernel per call"][:4] == ["4.6", "4.7", "4.9", "5.0"]
    assert rows["`cuLaunchKernel` floor, 2 ranks sharing the GPU (488 bytes of arguments)"][:4] == ["4.0", "4.1", "4.2", "4.2"]
    assert "- C, 2 ranks sharing the GPU: `eager_bench mp --nranks=2" in host
    assert rows["`ncclAllReduce`, NCCL"] == ["4.1", "4.1", "4.2", "4.3", "the drop-in's reference", "—"]
    assert rows["`ncclAllReduce`, drop-in, `SYMM_NCCL_MODE=symm`"] == ["2.6", "2.6", "2.7", "2.9", "≤ NCCL + 2 µs", "yes"]
    # auto: 6.5 µs at 4 MiB against NCCL's 4.3 + 2.
    assert rows["`ncclAllReduce`, drop-in, `SYMM_NCCL_MODE=auto`"][3:] == ["6.5", "≤ NCCL + 2 µs",
                                                                          "**no**: 4 MiB (6.5 > 6.3)"]
    assert rows["grouped `symmSend`/`symmRecv` (C API)"] == ["3.6", "3.7", "3.8", "4.1", "—", "—"]
    assert rows["grouped `ncclSend`/`ncclRecv`, NCCL"][:4] == ["5.2", "5.2", "5.4", "5.6"]
    assert rows["grouped `ncclSend`/`ncclRecv`, drop-in, `SYMM_NCCL_MODE=auto`"] == [
        "4.3", "4.3", "4.5", "4.7", "≤ NCCL + 2 µs", "yes"]
    assert rows["Python `Communicator.all_reduce`"] == ["7.4", "7.5", "7.6", "10.8", "≤ 10 µs",
                                                         "**no**: 4 MiB (10.8 > 10.0)"]
    assert rows["Python ctypes `symmAllReduce` (raw call)"] == ["3.2", "3.2", "3.3", "3.5", "—", "—"]
    # PyTorch rows: the minimum over the runs (judged), the median in brackets.
    assert rows["PyTorch `dist.all_reduce`, NCCL"][:4] == ["14.4 (14.8)", "14.5 (14.9)", "14.6 (15.0)", "14.8 (15.3)"]
    assert rows["PyTorch `dist.all_reduce`, preloaded drop-in, `SYMM_NCCL_MODE=symm`"][4:] == [
        "≤ PyTorch's NCCL + 2 µs", "yes"]
    assert rows["PyTorch `dist.all_reduce`, preloaded drop-in, `SYMM_NCCL_MODE=auto`"][5] == \
        "**no**: 256 KiB (16.8 > 16.6), 4 MiB (16.9 > 16.8)"
    # Where each group of rows comes from.
    assert "(2026-12-03 10:00:00 UTC; NCCL rows: NCCL, library `/usr/local/lib/python3.12/dist-packages/nvidia/nccl/" \
           "lib/libnccl.so.2`)" in host
    assert "NCCL rows: the drop-in in `SYMM_NCCL_MODE=auto`" in host
    assert "- Python: `SYMMCOMM_LIBRARY=" in host and "- PyTorch (symm-auto): `SYMM_NCCL_LIB=" in host
    # --host-table: that table alone.
    alone = pt.render(host_inputs(), host_only=True)
    assert alone.startswith("#### Host CPU per call") and "#### C API" not in alone
    r = subprocess.run([sys.executable, str(SCRIPT), "--host-table", *host_inputs()], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == alone.strip()
    # Inputs of two ranks make no such table.
    assert "Host CPU" not in pt.render([str(DATA / "eager_bench.txt"), str(DATA / "eager_loop_nccl.json")])
    assert "no host-cost table" in pt.render([str(DATA / "eager_bench.txt")], host_only=True)


def test_eager_bench_tables_per_size_and_op():
    """eager_bench --sizes / --op=sendrecv: one table per size, each with its
    run's command and environment."""
    md = pt.render(host_inputs())
    titles = [line for line in md.splitlines() if line.startswith("#### C API:")]
    assert len(titles) == 28  # 2 ops x 3 runs x 4 sizes, and the 2-rank all-reduce run's 4
    assert titles.count("#### C API: eager all-reduce loop of 8 B, per call, min/median/max over runs") == 4
    assert titles.count("#### C API: eager grouped send/recv loop of 4 MiB, per call, min/median/max over runs") == 3
    runs = pt.parse_device_bench((HOST / "host_c_sendrecv_auto.log").read_text())
    assert len(runs) == 1
    run = runs[0]
    assert run["step"] == "host_c_sendrecv_auto" and run["ranks"] == 1 and run["status"] == "0 wrong element(s): OK"
    assert run["env"] == {"SYMM_NCCL_MODE": "auto",
                          "SYMM_NCCL_LIB": "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"}
    assert [t["name"] for t in run["tables"]] == ["eager sendrecv 8", "eager sendrecv 4096", "eager sendrecv 262144",
                                                  "eager sendrecv 4194304"]
    assert pt.eager_host_cpu(run)[("sendrecv", 4096)] == {"nccl-same": 4.3, "nccl-rotating": 4.6, "symm-same": 3.6,
                                                          "symm-rotating": 3.9}
    # The first of the three (inputs in name order: auto, nccl, symm).
    one = section(md, "#### C API: eager grouped send/recv loop of 4 KiB")
    assert ("Environment: `SYMM_NCCL_MODE=auto SYMM_NCCL_LIB=/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/"
            "libnccl.so.2`.") in one
    assert "| nccl-same | 4.4/4.7/5.3 | 4.1/4.3/4.6 | 17.2/25.8/172.0 | 1.00 | 0 |" in one
    assert "| symm-rotating | 4.0/4.3/4.8 | 3.7/3.9/4.2 | 15.6/23.4/156.0 | 1.16 | 0 |" in one
    # The single-size table keeps its name; the host table reads its size from the loop line.
    legacy = pt.parse_device_bench((DATA / "eager_bench.txt").read_text())[0]
    assert legacy["loop_bytes"] == 262144 and legacy["tables"][0]["name"] == "eager"
    assert pt.eager_host_cpu(legacy) == {("allreduce", 262144): {"nccl-same": 10.4, "nccl-rotating": 10.4,
                                                                 "symm-same": 4.6, "symm-rotating": 4.9}}


def test_eager_bench_formats_are_the_samples():
    """The lines the host samples and the parser rely on are eager_bench.c's
    own format strings."""
    src = (REPO / "c_tests" / "bench" / "eager_bench.c").read_text()
    for fmt in ('"#\\n# table eager %s %zu: eager %s loop of %s, per call, min/median/max over runs\\n"',
                '"# environment:%s%s%s%s\\n"',
                '{"allreduce", "sendrecv"}', '{"all-reduce", "grouped send/recv"}',
                '"# loop: %d back-to-back in-place all-reduces (bf16 sum, plain buffers)"',
                '" of %s%s bytes, one stream wait after; %d runs per variant, each the slowest rank\'s; rotating: %d "',
                '"buffers in turn\\n", O.nsizes > 1 ? "each size in turn: " : ""',
                '"%-*s  %20s  %20s  %24s  %6s"', '"  %6llu\\n"'):
        assert fmt in src, fmt
    text = (HOST / "host_c_allreduce_symm.log").read_text()
    assert ("# loop: 2000 back-to-back in-place all-reduces (bf16 sum, plain buffers) of each size in turn: 8, 4096, "
            "262144, 4194304 bytes, one stream wait after; 5 runs per variant, each the slowest rank's; rotating: 64 "
            "buffers in turn") in text
    assert "# table eager allreduce 262144: eager all-reduce loop of 256 KiB, per call, min/median/max over runs" in text
    assert "\n# environment: SYMM_NCCL_MODE=symm\n" in text


def test_host_table_roles(tmp_path):
    """A smoke run's reference is the stand-in (its step's name says it is
    the reference); without device-measure's step line a run's role comes
    from its library and environment."""
    standin = "/root/symmcomm/.device/lib/libsymmcomm_nccl.so"
    for name in ("host_c_allreduce_nccl.log", "host_c_allreduce_symm.log", "host_c_allreduce_auto.log"):
        text = (HOST / name).read_text()
        if name.endswith("_nccl.log"):  # smoke: the stand-in in SYMM_NCCL_MODE=symm
            text = text.replace("/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2", standin)
            text = text.replace(f"# NCCL library: {standin}\n",
                                f"# NCCL library: {standin}\n# environment: SYMM_NCCL_MODE=symm\n")
        (tmp_path / name).write_text(text)
    smoke = pt.render(sorted(str(p) for p in tmp_path.iterdir()), host_only=True)
    assert table_rows(smoke)["`ncclAllReduce`, NCCL"][:4] == ["4.1", "4.1", "4.2", "4.3"]
    assert "NCCL rows: **the stand-in** (smoke run: no real NCCL here)" in smoke
    # No step lines: the real NCCL by its library, the stand-in's mode by the environment (auto when unset).
    for p in tmp_path.iterdir():
        p.unlink()
    for name in ("host_c_allreduce_nccl.log", "host_c_allreduce_symm.log", "host_c_allreduce_auto.log"):
        lines = (HOST / name).read_text().splitlines(keepends=True)[1:]
        if name.endswith("_auto.log"):
            lines = [line for line in lines if not line.startswith("# environment:")]
        (tmp_path / name).write_text("".join(lines))
    runs = [pt.parse_device_bench(p.read_text())[0] for p in sorted(tmp_path.iterdir())]
    assert [pt.eager_role(r) for r in runs] == ["auto", "nccl", "symm"]
    rows = table_rows(pt.render(sorted(str(p) for p in tmp_path.iterdir()), host_only=True))
    assert rows["`ncclAllReduce`, drop-in, `SYMM_NCCL_MODE=auto`"][:4] == ["2.9", "2.9", "3.1", "6.5"]
    assert "Python `Communicator.all_reduce`" not in rows  # only what was given
    assert not any(k.startswith("PyTorch") or k.startswith("grouped") for k in rows)


def test_host_table_missing_reference(tmp_path):
    """A drop-in row without its NCCL row: the reference row shows the gap,
    and the target is not judged."""
    for name in ("host_c_sendrecv_symm.log", "host_torch_symm-symm.json"):
        (tmp_path / name).write_text((HOST / name).read_text())
    rows = table_rows(pt.render(sorted(str(p) for p in tmp_path.iterdir()), host_only=True))
    assert rows["grouped `ncclSend`/`ncclRecv`, NCCL"] == ["—", "—", "—", "—", "the drop-in's reference", "—"]
    assert rows["grouped `ncclSend`/`ncclRecv`, drop-in, `SYMM_NCCL_MODE=symm`"][5] == "—"
    assert rows["PyTorch `dist.all_reduce`, NCCL"][:4] == ["—"] * 4


def test_host_cost_and_multi_size_eager_loop_tables():
    md = pt.render(host_inputs())
    py = section(md, "#### Python package: `Communicator.all_reduce` per call, back to back")
    assert "| `Communicator.all_reduce` | 1 | 4 MiB | 10.77 / 11.10 / 12.43 | 10.48 / 10.80 / 12.10 | 109 | ≤ 10 µs: " \
           "**not met** |" in py
    assert "| `Communicator.all_reduce` | 1 | 8 B | 7.47 / 7.70 / 8.62 | 7.18 / 7.40 / 8.29 | 75 | ≤ 10 µs: met |" in py
    assert "| `ctypes symmAllReduce` | 1 | 256 KiB |" in py and "5 runs of 2000 calls per API and size" in py
    t = section(md, "#### PyTorch eager loops at 1 ranks")
    lines = [line for line in t.splitlines() if line.startswith("| nccl ")]
    assert [line.split(" | ")[2] for line in lines] == ["all_reduce 8 B", "all_reduce 4 KiB", "all_reduce 256 KiB",
                                                        "all_reduce 4 MiB", "MLP step, 16 tokens"]
    # Each size's ratio to NCCL's same size.
    assert "| symm-symm | 1 | all_reduce 4 KiB | 13.9 / 14.3 / 16.0 | 13.6 / 14.0 / 15.7 | 141 | 1.06 | yes |" in t
    # The benchmarks' own table modes agree, and read old single-size documents beside new ones.
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "host_cost_bench.py"), "table",
                          str(HOST / "host_python.json")], capture_output=True, text=True, check=True).stdout
    assert "| `Communicator.all_reduce` | 1 | 4 MiB | 10.77 / 11.10 / 12.43 |" in out
    out = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "eager_loop_bench.py"), "table",
                          str(DATA / "eager_loop_nccl.json"), str(HOST / "host_torch_symm-symm.json")],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| symm-symm ")]
    ratios = {line.split(" | ")[2]: line.split(" | ")[6] for line in rows}
    # Only 256 KiB and the step exist in the (two-rank, one-size) reference.
    assert ratios["all_reduce 8 B"] == "—" and ratios["all_reduce 256 KiB"] != "—" and ratios["MLP step, 16 tokens"] != "—"


def test_benchmark_size_lists():
    """--bytes / --sizes of the PyTorch benchmarks: lists, checked."""
    for name in ("eager_loop_bench", "host_cost_bench"):
        mod = pt.torch_bench(name)
        parse = mod.parse_sizes
        assert parse("8,4K,256K,4M") == [8, 4096, 262144, 4194304]
        for bad in ("8,3", "8,8", "4Q", "0"):
            with pytest.raises(Exception):
                parse(bad)
        opt = "--bytes" if name == "eager_loop_bench" else "--sizes"
        r = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / f"{name}.py"), "run", "x.json", opt, "8,3"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "sizes must be positive even numbers of bytes" in r.stderr
    assert pt.torch_bench("eager_loop_bench").allreduce_loops({"bytes": 262144}) == [("allreduce", 262144)]
    assert pt.torch_bench("eager_loop_bench").allreduce_loops({"bytes": [8, 4096]}) == [("allreduce@8", 8),
                                                                                        ("allreduce@4096", 4096)]


def test_host_cost_bench_skips_without_torch_or_gpu():
    """Without PyTorch (or a GPU) the Python benchmark says so and exits 77."""
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: the skip path is for machines without it")
    r = subprocess.run([sys.executable, str(REPO / "tests" / "torch" / "host_cost_bench.py"), "run", "x.json"],
                       capture_output=True, text=True)
    assert r.returncode == 77 and r.stdout.startswith("skipped: PyTorch is not installed")


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
    for name in ("fused_torch_bench.py", "tp_mlp_bench.py", "eager_loop_bench.py", "host_cost_bench.py"):
        src = (REPO / "tests" / "torch" / name).read_text()
        compile(src, name, "exec")


SHELL_SCRIPTS = ["device-measure", "device-run", "perf-sweep", "gpu-count", "device-nccl", "device-nccl-native"]


@pytest.mark.parametrize("name", SHELL_SCRIPTS)
def test_shell_scripts_parse(name):
    subprocess.run(["bash", "-n", str(REPO / "scripts" / name)], check=True)


def test_gpu_count_respects_cuda_visible_devices(tmp_path):
    """The device scripts size their runs by scripts/gpu-count: a run pinned
    to GPU 0 of a 4-GPU machine must see one GPU (the ninth session's
    device-nccl started 4 ranks there and 3 found no device)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3; do echo \"GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)\"; done\n")
    smi.chmod(0o755)
    script = str(REPO / "scripts" / "gpu-count")

    def count(path, visible):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["PATH"] = path
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return subprocess.run([shutil.which("bash") or "/bin/bash", script], env=env, capture_output=True, text=True, check=True).stdout.strip()

    with_smi = f"{tmp_path}:/usr/bin:/bin"
    assert count(with_smi, None) == "4"
    assert count(with_smi, "0") == "1"
    assert count(with_smi, "2,3") == "2"
    assert count(with_smi, "0,1,2,3,4,5") == "4", "never more than nvidia-smi lists"
    empty = tmp_path / "empty"
    empty.mkdir()
    for tool in ("grep", "cat"):
        real = shutil.which(tool)
        if real:
            (empty / tool).symlink_to(real)
    assert count(str(empty), None) == "0", "no nvidia-smi: no GPU"


def test_device_measure_is_shellcheck_clean():
    sc = shutil.which("shellcheck")
    if not sc:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run([sc, str(REPO / "scripts" / "device-measure")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


BENCHES = [REPO / "build" / "c_tests" / "bench" / b for b in ("symm_bench", "fused_bench", "device_bench", "eager_bench")]


@pytest.mark.parametrize("args", [["--gpus", "4", "all"], ["--smoke"], ["--gpus", "2", "sweep:2:staged", "device"],
                                  ["--gpus", "1", "host"], ["--gpus", "4", "norm:4:ll"],
                                  ["--gpus", "2", "p2p:2"], ["--gpus", "2", "ll:2"], ["--gpus", "4", "pair:4:symmetric"],
                                  ["--gpus", "4", "ab:3:SYMM_LL_MAX_BYTES=786432,SYMM_ALGO=ll"],
                                  ["--gpus", "4", "ab:3:SYMM_LL_MAX_BYTES=786432,SYMM_ALGO=ll",
                                   "ab:3:SYMM_LL_MAX_BYTES=1048576:sendrecv:256K-4M"]])
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
    host = ["host_c_allreduce_nccl", "host_c_allreduce_symm", "host_c_allreduce_auto", "host_c_sendrecv_nccl",
            "host_c_sendrecv_symm", "host_c_sendrecv_auto", "host_c2_allreduce_symm", "host_python", "host_torch_nccl", "host_torch_symm-symm",
            "host_torch_symm-auto"]
    logs = tmp_path / "symmcomm-measure-logs" / "measure"
    if args == ["--smoke"]:
        assert names == ["build", "eager_c_n2", "eager_torch_n1_nccl", "eager_torch_n1_symm-auto",
                         "eager_torch_n1_symm-symm", *host, "suite_smoke", "sweep_n2_staged_eager", "sweep_n2_staged_graph", "timeline_n2_staged",
                         "sweep_n2_symmetric_eager", "sweep_n2_symmetric_graph", "timeline_n2_symmetric",
                         "fused_n2_bf16", "fused_n2_e4m3", "fused_torch_n1", "device_n2", "norm_n2_h4096", "norm_n2_h8192", "tp_mlp_n1_nccl",
                         "tp_mlp_n1_preloaded", "moe_n1", "allreduce_torch_n1"]
        log = (tmp_path / "symmcomm-measure-logs" / "measure" / "sweep_n2_staged_eager.log").read_text()
        assert "--nccl-lib" in log and "SYMM_NCCL_MODE=symm" in log
        # The host tier's reference served by the stand-in (no real NCCL in smoke runs), short loops.
        ref = (logs / "host_c_allreduce_nccl.log").read_text().splitlines()[0]
        assert "SYMM_NCCL_MODE=symm" in ref and "libsymmcomm_nccl.so" in ref and "--calls=50" in ref
    elif args[-1] == "host":
        assert names == ["build", *host]
        first = {name: (logs / f"{name}.log").read_text().splitlines()[0] for name in host}
        # The commands of the tier, as docs/PERFORMANCE.md gives them.
        assert first["host_c_allreduce_nccl"].endswith(
            "env SYMM_TIMEOUT=60 CUDA_VISIBLE_DEVICES=0 build/c_tests/bench/eager_bench mp --nranks=1 --op=allreduce "
            "--sizes=8,4K,256K,4M --vs-nccl --launch-floor --nccl-lib=libnccl.so.2") or "nvidia/nccl" in first["host_c_allreduce_nccl"]
        assert "--launch-floor" not in first["host_c_sendrecv_symm"]
        assert "SYMM_NCCL_MODE=symm SYMM_TIMEOUT=60 CUDA_VISIBLE_DEVICES=0 build/c_tests/bench/eager_bench mp --nranks=1 " \
               "--op=sendrecv --sizes=8,4K,256K,4M --vs-nccl --nccl-lib=" in first["host_c_sendrecv_symm"]
        assert first["host_c_sendrecv_symm"].endswith("/libsymmcomm_nccl.so")
        assert "SYMM_NCCL_MODE=auto" in first["host_c_allreduce_auto"]
        assert "tests/torch/host_cost_bench.py run" in first["host_python"] and "--sizes 8,4K,256K,4M" in first["host_python"]
        assert "--nproc-per-node=1 tests/torch/eager_loop_bench.py run" in first["host_torch_symm-auto"]
        assert "LD_PRELOAD=" in first["host_torch_symm-auto"] and "LD_PRELOAD=" not in first["host_torch_nccl"]
        assert first["host_torch_nccl"].endswith("--bytes 8,4K,256K,4M")
    elif args[-1] == "all":
        assert "suite_n4" in names and "sweep_n4_symmetric_graph" in names and "timeline_n4_staged" in names
        assert "fused_n4_e4m3" in names and "device_n2" in names and "device_n4" in names
        assert "tp_mlp_n4_preloaded" in names
        assert names[1:5] == ["eager_c_n2", "eager_torch_n2_nccl", "eager_torch_n2_symm-auto", "eager_torch_n2_symm-symm"]
        assert "eager_c_n4" in names and "eager_torch_n4_symm-symm" in names
        # 2-rank tests on 4 GPUs: a pair of GPUs per CTest process; 3 ranks: no second set.
        assert "--jobs 4 --gpu-sets 0,1 2,3 --budget" in (logs / "suite_n2.log").read_text().splitlines()[0]
        assert "--gpu-sets" not in (logs / "suite_n3.log").read_text().splitlines()[0]
        assert names[names.index("eager_torch_n4_symm-symm") + 1:][:len(host)] == host
    elif args[-1] == "p2p:2":
        assert names == ["build", "p2p_n2_staged_ring4M_eager", "p2p_n2_staged_ring4M_graph", "p2p_n2_staged_ring16M_eager",
                         "p2p_n2_staged_ring16M_graph", "p2p_coresident_n2", "p2p_coresident_n2_symmetric"]
        first = (logs / "p2p_n2_staged_ring16M_graph.log").read_text().splitlines()[0]
        assert "SYMM_P2P_RING_BYTES=16777216" in first and " -G " in first and "stride=4" in first
        assert "-m initall" in (logs / "p2p_coresident_n2.log").read_text().splitlines()[0]
    elif args[-1] == "ll:2":
        assert names == ["build", "ll_n2_staged_eager", "ll_n2_staged_graph", "ll_n2_symmetric_eager",
                         "ll_n2_symmetric_graph"]
        first = (logs / "ll_n2_symmetric_graph.log").read_text().splitlines()[0]
        assert " -G " in first and "-b 4K -e 4M -f 2" in first and "direct=64:ll=1024" in first
    elif args[-1] == "pair:4:symmetric":
        assert names == ["build", "pair_n4_symmetric_eager", "pair_n4_symmetric_graph"]
        first = (logs / "pair_n4_symmetric_graph.log").read_text().splitlines()[0]
        assert " -G " in first and "-c sendrecv,alltoall" in first and "-g 4" in first
        assert "direct=64:ll=1024:pair=1," in first and "direct=64:pair=1 " in first
    elif args[-1].startswith("ab:3:SYMM_LL_MAX_BYTES=1048576"):
        # A second ab tier in the call: its own step names, its collectives and sizes.
        each = [f"_n3_{c}_{k}_{side}" for c in ("staged", "symmetric") for k in ("eager", "graph") for side in ("base", "env")]
        assert names == ["build"] + [f"ab{s}" for s in each] + [f"ab2{s}" for s in each]
        first = (logs / "ab2_n3_staged_graph_env.log").read_text().splitlines()[0]
        assert "SYMM_LL_MAX_BYTES=1048576 " in first and "-c sendrecv -b 256K -e 4M -f 2 " in first
        assert "-c allreduce,reducescatter" in (logs / "ab_n3_staged_graph_env.log").read_text().splitlines()[0]
    elif args[-1].startswith("ab:3:"):
        assert names == ["build"] + [f"ab_n3_{c}_{k}_{side}" for c in ("staged", "symmetric") for k in ("eager", "graph")
                                     for side in ("base", "env")]
        base = (logs / "ab_n3_symmetric_graph_base.log").read_text().splitlines()[0]
        other = (logs / "ab_n3_symmetric_graph_env.log").read_text().splitlines()[0]
        assert "SYMM_LL_MAX_BYTES" not in base and "SYMM_ALGO" not in base and " -G " in base and "--algos" not in base
        assert "SYMM_LL_MAX_BYTES=786432 SYMM_ALGO=ll " in other and other.split("build/c_tests")[1] == base.split("build/c_tests")[1]
    elif args[-1] == "norm:4:ll":
        assert names == ["build", "norm_n4_h4096_ll", "norm_n4_h8192_ll"]
        assert "SYMM_ALGO=ll " in (logs / "norm_n4_h4096_ll.log").read_text().splitlines()[0]
    else:
        assert names == ["build", "sweep_n2_staged_eager", "sweep_n2_staged_graph", "timeline_n2_staged", "device_n2"]
    # NCCL's window column beside its ordinary one wherever a benchmark has
    # it (smoke runs too: the stand-in serves the window calls); fused_bench
    # has none, and the timeline and co-resident runs have no NCCL at all.
    for name in names:
        command = (logs / f"{name}.log").read_text().splitlines()[0]
        has_window = "--nccl-window" in command
        with_nccl = name.startswith(("sweep_", "device_", "norm_", "eager_c_", "p2p_n", "ll_n", "pair_n", "ab_n", "ab2_n"))
        assert has_window == with_nccl, command
    for f in ("tables.md", "tables-full.md", "measure.tgz"):
        assert (tmp_path / "out" / f).is_file()


@pytest.mark.parametrize("tier", ["ab:3:SYMM_X=1:send-recv", "ab:3:SYMM_X=1:sendrecv:4M", "ab:3:sendrecv"])
def test_device_measure_ab_refuses_bad_specs(tmp_path, tier):
    env = dict(os.environ, SYMM_MEASURE_TMP=str(tmp_path), OUT=str(tmp_path / "out"))
    r = subprocess.run([str(REPO / "scripts" / "device-measure"), "--dry-run", "--gpus", "4", tier], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "-- ab:3: " in r.stdout, r.stdout + r.stderr
    assert "ab_n3" not in r.stdout


def test_device_measure_host_takes_no_rank_count(tmp_path):
    env = dict(os.environ, SYMM_MEASURE_TMP=str(tmp_path), OUT=str(tmp_path / "out"))
    r = subprocess.run([str(REPO / "scripts" / "device-measure"), "--dry-run", "host:2"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "host:2: the host tier runs at world size 1 on one GPU (no :N)" in (tmp_path / "out" / "summary.txt").read_text()
    r = subprocess.run([str(REPO / "scripts" / "device-measure"), "--help"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and "  host " in r.stdout and "eager and\n                   host first" in r.stdout


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
    kinds = {p.name: json.loads(p.read_text()).get("kind") for p in HOST.iterdir() if p.suffix == ".json"}
    assert kinds == {"host_python.json": "host_cost", "host_torch_nccl.json": "eager_loop",
                     "host_torch_symm-symm.json": "eager_loop", "host_torch_symm-auto.json": "eager_loop"}
    logs = sorted(p.name for p in HOST.iterdir() if p.suffix == ".log")
    assert logs == ["host_c2_allreduce_symm.log"] + [
        f"host_c_{op}_{role}.log" for op in ("allreduce", "sendrecv") for role in ("auto", "nccl", "symm")]
