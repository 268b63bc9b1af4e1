"""The README's Python section stays true: its example compiles and every
symmcomm call in it exists with a signature that accepts the arguments
given (the GPU pass runs it for real: python/tests/readme_example.py), and
the commands and names it documents exist."""

import ast
import inspect
import re

import pytest

import symmcomm
import symmcomm.symmetric_memory as symm_mem
from readme_example import README, example_code


@pytest.fixture(scope="module")
def code():
    return example_code()


def test_example_compiles(code):
    compile(code, "README.md", "exec")
    assert "import symmcomm" in code


def _receivers():
    # What each name in the example stands for.
    return {
        "symmcomm": symmcomm,
        "symm_mem": symm_mem,
        "comm": symmcomm.Communicator,
        "hdl": symm_mem.SymmetricMemory,
    }


def test_example_calls_exist_with_their_arguments(code):
    receivers = _receivers()
    checked = []
    for node in ast.walk(ast.parse(code)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        base = node.func.value
        if not (isinstance(base, ast.Name) and base.id in receivers):
            continue
        owner = receivers[base.id]
        name = node.func.attr
        assert hasattr(owner, name), f"README example calls {base.id}.{name}, which does not exist"
        fn = getattr(owner, name)
        sig = inspect.signature(fn)
        args = [None] * len(node.args)
        if inspect.isclass(owner) and not isinstance(inspect.getattr_static(owner, name), (staticmethod, classmethod)):
            args = [None] + args  # self
        sig.bind(*args, **{k.arg: None for k in node.keywords if k.arg})
        checked.append(f"{base.id}.{name}")
    for must in ("symmcomm.Communicator", "comm.all_reduce", "symm_mem.empty", "symm_mem.rendezvous",
                 "hdl.get_buffer", "hdl.barrier", "comm.destroy"):
        assert must in checked, f"the README example no longer shows {must}"


def test_example_is_short(code):
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) <= 16, f"the README example has {len(lines)} lines of code"


def test_documented_names_exist():
    text = README.read_text()
    section = text[text.index("## Python"):text.index("## Development")]
    for cmd in ("pip install ./python", "scripts/setup", "python/tests/gpu/run.sh",
                "examples/python/one_shot_all_reduce_triton.py", "SYMMCOMM_LIBRARY", "SYMMCOMM_BUNDLE_LIBRARY"):
        assert cmd in section, cmd
    for name in re.findall(r"`symm_mem\.(\w+)", section):
        assert hasattr(symm_mem, name), f"symm_mem.{name}"
    for name in ("get_buffer", "get_signal_pad", "barrier", "put_signal", "wait_signal", "stream_write_value32",
                 "memset32", "buffer_ptrs", "buffer_ptrs_dev", "signal_pad_ptrs_dev"):
        assert name in section
        # A method, or an attribute __init__ assigns (buffer_ptrs_dev ...); the
        # class docstring, which names them all, does not count.
        assigned = re.search(rf"self\.{name}\s*[:=]", inspect.getsource(symm_mem.SymmetricMemory.__init__))
        assert name in dir(symm_mem.SymmetricMemory) or assigned, name
    for name in ("split", "destroy", "abort", "get_async_error", "check_async_error", "synchronize", "all_reduce",
                 "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all_single",
                 "send", "recv", "batch_isend_irecv", "barrier", "from_unique_id"):
        assert callable(getattr(symmcomm.Communicator, name)), name
    for name in ("all_gather_matmul", "matmul_reduce_scatter", "get_unique_id"):
        assert callable(getattr(symmcomm, name)), name
    assert (README.parent / "examples" / "python" / "one_shot_all_reduce_triton.py").is_file()
    assert (README.parent / "python" / "tests" / "gpu" / "run.sh").is_file()


def _algo_tokens():
    # The tokens the parser accepts, as its error for an unknown one lists
    # them (src/comm/algo.rs `Algo::parse`).
    src = (README.parent / "src" / "comm" / "algo.rs").read_text()
    listed = re.search(r"\(tokens: (.*?)joined with '\+'\)", src, re.S).group(1)
    listed = re.sub(r'\\\s*\n\s*', "", listed)  # the string's line continuations
    return [t.strip() for t in listed.split(",") if t.strip()]


def test_every_algorithm_token_is_documented():
    text = README.read_text()
    section = text[text.index("### Choosing kernels (`SYMM_ALGO`)"):text.index("## Using the library")]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    # A token's name without its values: "p2p:blocks=N:kib=K" and "grid=N"
    # stand for p2p and grid.
    name = lambda t: re.split(r"[:=]", t)[0]
    documented = {name(t) for ln in rows for t in re.findall(r"`([^`]+)`", ln.split(" | ")[0])}
    tokens = {name(t) for t in _algo_tokens()}
    assert len(tokens) >= 25 and {"classic2", "ownstaged", "p2p", "grid"} <= tokens, tokens
    assert not tokens - documented, f"SYMM_ALGO tokens with no row in the README: {sorted(tokens - documented)}"
    assert not documented - tokens, f"the README documents tokens the parser does not take: {sorted(documented - tokens)}"
