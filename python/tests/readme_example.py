"""The README's Python example, as the README prints it: ``example_code()``
extracts it (the tests check it on CPU); run under torchrun this file runs
it and checks what it computed:

    torchrun --standalone --nproc-per-node 2 python/tests/readme_example.py
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- python-example: kept runnable by python/tests -->"


def example_code() -> str:
    text = README.read_text()
    at = text.index(MARKER)
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, at)
    return m.group(1)


def main() -> int:
    sys.path.insert(0, str(README.parent / "python"))
    scope: dict = {"__name__": "readme_example"}
    exec(compile(example_code(), "README.md (python example)", "exec"), scope)
    import torch.distributed as dist

    x, rank, world = scope["x"], scope["rank"], scope["world"]
    want = world * (world + 1) / 2
    ok = x[0].item() == want and scope["got"] == (rank + 1) % world
    print(f"{'PASS' if ok else 'FAIL'} readme_example rank {rank}: all_reduce {x[0].item()} (want {want}), "
          f"peer's buffer {scope['got']} (want {(rank + 1) % world})", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
