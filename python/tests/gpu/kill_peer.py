"""A peer killed mid-collective: the survivor gets a Python exception naming
the timeout within SYMM_TIMEOUT + 1 s, and abort() returns.

    python3 python/tests/gpu/kill_peer.py [--timeout SECONDS]

The parent makes the unique id and starts two ranks (plain processes, not
torchrun, whose agent would tear the survivor down when a worker dies).
Both loop all_reduce + Communicator.synchronize(); once rank 1 says it is
running, the parent SIGKILLs it and notes the time. Rank 0 reports when
its exception came and how long abort() took. Exit 0 when the exception is
a SymmTimeoutError that arrived within SYMM_TIMEOUT + 1 s of the kill and
abort() returned.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))


def child(rank: int, uid_hex: str) -> int:
    import torch

    import symmcomm

    torch.cuda.set_device(rank % torch.cuda.device_count())
    comm = symmcomm.Communicator.from_unique_id(uid_hex, rank, 2)
    x = torch.ones(1 << 20, device=comm.device)
    i = 0
    try:
        while True:
            comm.all_reduce(x)
            comm.all_reduce(x, op=symmcomm.ReduceOp.Avg)
            comm.synchronize()
            i += 1
            if i == 20:
                print(json.dumps({"rank": rank, "running": True}), flush=True)
    except symmcomm.SymmError as e:
        t_error = time.time()
        start = time.monotonic()
        comm.abort()
        abort_s = time.monotonic() - start
        print(json.dumps({"rank": rank, "t_error": t_error, "iterations": i, "type": type(e).__name__,
                          "is_timeout": isinstance(e, TimeoutError), "code": e.code, "error": str(e),
                          "abort_s": abort_s}), flush=True)
        return 0


def parent(timeout: float) -> int:
    import symmcomm

    uid = symmcomm.get_unique_id()  # this process hosts the rendezvous root
    env = dict(os.environ, SYMM_TIMEOUT=str(timeout), PYTHONPATH=str(REPO / "python"))
    env.setdefault("SYMM_TEST_SHARED_DEVICES", "1")
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(r), uid.hex()], env=env,
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    ready, _, _ = select.select([procs[1].stdout], [], [], 120)
    line = procs[1].stdout.readline() if ready else ""  # rank 1 is running
    if not line:
        for p in procs:
            p.kill()
        print("FAIL kill_peer: rank 1 never started its loop")
        return 1
    procs[1].send_signal(signal.SIGKILL)
    t_kill = time.time()
    procs[1].wait()
    try:
        out, _ = procs[0].communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        print(f"FAIL kill_peer: the survivor did not return within SYMM_TIMEOUT + 60 s ({timeout + 60:.0f} s)")
        return 1
    reports = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    report = next((r for r in reports if "t_error" in r), None)
    if report is None:
        print(f"FAIL kill_peer: rank 0 exited {procs[0].returncode} without an exception report: {out[-500:]}")
        return 1
    delay = report["t_error"] - t_kill
    ok = (report["is_timeout"] and "timeout" in report["error"].lower() and 0 <= delay <= timeout + 1
          and report["abort_s"] < 30)
    print(f"{'PASS' if ok else 'FAIL'} kill_peer: {report['type']} {delay:.2f} s after the kill "
          f"(SYMM_TIMEOUT {timeout:g} s, bound {timeout + 1:g} s), abort() returned in {report['abort_s']:.2f} s; "
          f"message: {report['error']}")
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, default=5.0, help="SYMM_TIMEOUT for the ranks")
    p.add_argument("--child", nargs=2, metavar=("RANK", "UID"))
    a = p.parse_args()
    sys.exit(child(int(a.child[0]), a.child[1]) if a.child else parent(a.timeout))
