"""The GPU pass (python/tests/gpu/run.sh), one test per stage. It needs
torch with a CUDA device; elsewhere (CI) every stage is skipped with the
reason. On a GPU machine without pytest, run python/tests/gpu/run.sh."""

import shutil
import subprocess
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parent / "gpu" / "run.sh"
STAGES = ["multirank-2", "multirank-4", "kill", "example-2", "readme-2"]


def _gpu_unavailable():
    try:
        import torch
    except ImportError:
        return "torch is not installed (GPU tests run on a GPU machine: python/tests/gpu/run.sh)"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if shutil.which("torchrun") is None:
        return "torchrun is not on PATH"
    return None


@pytest.mark.parametrize("stage", STAGES)
def test_gpu_stage(stage):
    reason = _gpu_unavailable()
    if reason:
        pytest.skip(reason)
    out = subprocess.run(["bash", str(RUN), stage], capture_output=True, text=True, timeout=900)
    print(out.stdout[-6000:])
    # torch sees a GPU, so the stage must run: its "no GPU" skip (77) fails here.
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
