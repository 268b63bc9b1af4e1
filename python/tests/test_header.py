"""The package's tables against include/symmcomm.h: every enum, #define,
prototype and struct the package mirrors must match the header exactly, so
a header change that the Python side does not follow fails here."""

import ctypes
import re

import pytest

import symmcomm
from symmcomm import _library as L
from symmcomm import _types as T

P = ctypes.POINTER


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_enums(text: str) -> dict:
    enums = {}
    for body, name in re.findall(r"typedef\s+enum\s*\{(.*?)\}\s*(\w+)\s*;", strip_comments(text), flags=re.S):
        enums[name] = {m: int(v) for m, v in re.findall(r"(\w+)\s*=\s*(-?\d+)", body)}
    return enums


def header_defines(text: str) -> dict:
    return {k: int(v) for k, v in re.findall(r"^#define\s+(\w+)\s+\(?(-?\d+)\)?\s*$", text, flags=re.M)}


def header_prototypes(text: str) -> dict:
    """name -> (return type, [parameter types]) of every symm* function."""
    code = strip_comments(text)
    protos = {}
    for ret, name, params in re.findall(r"([A-Za-z_][\w \*]*?)\s*\b(symm\w+)\s*\(([^;{}]*?)\)\s*;", code):
        ret = " ".join(ret.split()[-3:])  # drop anything before the declaration
        types = []
        params = " ".join(params.split())
        if params and params != "void":
            for p in params.split(","):
                p = p.strip()
                m = re.match(r"(.*?)(\w+)$", p)
                types.append(normalise(m.group(1)))
        protos[name] = (normalise(ret), types)
    return protos


def header_struct(text: str, name: str):
    """[(field, C type)] of ``typedef struct {...} name;``, or None."""
    # The body holds no braces: the match cannot start at an earlier struct.
    m = re.search(r"typedef\s+struct\s*\{([^{}]*)\}\s*" + name + r"\s*;", strip_comments(text), flags=re.S)
    if not m:
        return None
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        first, *more = [p.strip() for p in decl.split(",")]  # "size_t lda, ldb, ldc"
        base, stars, field = re.match(r"(.*?)\s*(\**)(\w+)$", first).groups()
        fields.append((field, normalise(base + stars)))
        for other in more:
            fields.append((other.lstrip("*"), normalise(base + "*" * (len(other) - len(other.lstrip("*"))))))
    return fields


def normalise(ctype: str) -> str:
    """'void**' and 'void * *' -> 'void **' (pointers come last in these types)."""
    stars = ctype.count("*")
    base = " ".join(ctype.replace("*", " ").split())
    return base + (" " + "*" * stars if stars else "")


# How each C type of the header must appear in the ctypes table.
C_TO_CTYPES = {
    "int": ctypes.c_int,
    "int *": P(ctypes.c_int),
    "const int *": P(ctypes.c_int),
    "size_t": ctypes.c_size_t,
    "size_t *": P(ctypes.c_size_t),
    "const size_t *": P(ctypes.c_size_t),
    "uint32_t": ctypes.c_uint32,
    "uint32_t *": P(ctypes.c_uint32),
    "float": ctypes.c_float,
    "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p,
    "void **": P(ctypes.c_void_p),
    "void ***": P(ctypes.c_void_p),
    "const float *": ctypes.c_void_p,
    "const int64_t *": ctypes.c_void_p,  # device arrays (symmAllToAllvDevice), passed as addresses
    "int64_t *": ctypes.c_void_p,
    "int64_t": ctypes.c_int64,  # symmAllToAllvDevice2d's localExperts, majorAlign
    "float *": ctypes.c_void_p,  # device arrays (symmAllReduceAddRMSNormFp8's scales)
    "const char *": ctypes.c_char_p,
    "symmResult_t": ctypes.c_int,
    "symmResult_t *": P(ctypes.c_int),
    "symmDataType_t": ctypes.c_int,
    "symmRedOp_t": ctypes.c_int,
    "symmCmp_t": ctypes.c_int,
    "symmScaleMode_t": ctypes.c_int,
    "symmScalarResidence_t": ctypes.c_int,
    "symmRedOp_t *": P(ctypes.c_int),
    "symmComm_t": ctypes.c_void_p,
    "symmComm_t *": P(ctypes.c_void_p),
    "symmUniqueId": L.symmUniqueId,
    "symmUniqueId *": P(L.symmUniqueId),
    "struct CUstream_st *": ctypes.c_void_p,
    "const symmConfig_t *": ctypes.c_void_p,
    "symmConfig_t *": ctypes.c_void_p,
    "const symmMatmulDesc_t *": P(L.symmMatmulDesc_t),
    "symmTimelineEvent_t *": ctypes.c_void_p,
    "const symmDevCommRequirements *": ctypes.c_void_p,
    "symmDevComm *": ctypes.c_void_p,
    "const symmDevComm *": ctypes.c_void_p,
    "symmMatmulDesc_t *": P(L.symmMatmulDesc_t),
}


def expect_ctype(ctype: str):
    assert ctype in C_TO_CTYPES, f"header type {ctype!r} has no mapping in this test: add one"
    return C_TO_CTYPES[ctype]


@pytest.mark.parametrize("py_enum, c_name", [
    (T.Result, "symmResult_t"),
    (T.DataType, "symmDataType_t"),
    (T.ReduceOp, "symmRedOp_t"),
    (T.Cmp, "symmCmp_t"),
    (T.ScaleMode, "symmScaleMode_t"),
    (T.ScalarResidence, "symmScalarResidence_t"),
])
def test_enum_matches_header(header_text, py_enum, c_name):
    enums = header_enums(header_text)
    assert c_name in enums, f"{c_name} is missing from the header"
    ours = {m.c_name: int(m) for m in py_enum}  # canonical members only, not the torch-style aliases
    assert ours == enums[c_name]


def test_defines_match_header(header_text):
    d = header_defines(header_text)
    assert d["SYMM_UNIQUE_ID_BYTES"] == T.UNIQUE_ID_BYTES
    assert d["SYMM_SIGNAL_CHANNELS"] == T.SIGNAL_CHANNELS
    assert d["SYMM_NUM_RESULTS"] == len(T.Result)
    assert d["symmNumTypes"] == len(T.DataType)
    assert d["symmNumOps"] == len(T.ReduceOp)
    assert d["SYMM_MAJOR"] == L.SUPPORTED_MAJOR
    assert d["SYMM_VERSION_CODE"] == d["SYMM_MAJOR"] * 10000 + d["SYMM_MINOR"] * 100 + d["SYMM_PATCH"]
    assert f'{d["SYMM_MAJOR"]}.{d["SYMM_MINOR"]}.{d["SYMM_PATCH"]}' == symmcomm.__version__
    assert d["SYMM_SPLIT_NOCOLOR"] == T.SPLIT_NOCOLOR


def test_function_table_matches_every_prototype(header_text):
    protos = header_prototypes(header_text)
    assert len(protos) >= 35, f"the header parser found only {sorted(protos)}"
    table = {f.name: f for f in L.FUNCTIONS}
    missing = sorted(set(protos) - set(table))
    assert not missing, f"header functions without a Python table entry: {missing}"
    for name, f in table.items():
        assert name in protos, f"{name} is in the table but not in the header"
        ret, params = protos[name]
        assert f.restype == expect_ctype(ret), f"{name}: returns {ret}"
        assert len(f.argtypes) == len(params), f"{name}: header has {len(params)} parameters {params}"
        for i, (ours, c) in enumerate(zip(f.argtypes, params)):
            assert ours == expect_ctype(c), f"{name}: parameter {i} is {c!r} in the header"


def test_matmul_desc_matches_header(header_text):
    fields = header_struct(header_text, "symmMatmulDesc_t")
    assert fields is not None, "symmMatmulDesc_t is missing from the header"
    ours = [(n, t) for n, t in L.symmMatmulDesc_t._fields_]
    assert [n for n, _ in ours] == [n for n, _ in fields]
    for (n, t), (_, c) in zip(ours, fields):
        want = expect_ctype(c)
        want = ctypes.c_void_p if c.endswith("*") else want
        assert t == want, f"field {n}: {c}"


def test_dtype_table_covers_every_element_type():
    # Each symmDataType_t has exactly one torch dtype, and the names are torch's.
    assert sorted(T.TORCH_DTYPES.values()) == sorted(T.DataType)
    known = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
             "bfloat16", "float8_e4m3fn", "float8_e5m2"}
    assert set(T.TORCH_DTYPES) == known
    sizes = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2,
             "float32": 4, "float64": 8, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
    for name, dt in T.TORCH_DTYPES.items():
        assert dt.itemsize == sizes[name], name
    for name, dt in T.COMPLEX_DTYPES.items():
        assert dt in (T.DataType.Float16, T.DataType.Float32, T.DataType.Float64)
    try:
        import torch
    except ImportError:
        return
    for name in list(T.TORCH_DTYPES) + list(T.COMPLEX_DTYPES):
        assert isinstance(getattr(torch, name), torch.dtype), name


def test_op_table_covers_every_op():
    assert set(T.OP_NAMES.values()) == set(T.ReduceOp)
    for name in ("sum", "SUM", "product", "prod", "max", "min", "avg", "ReduceOp.AVG", "RedOpType.MAX"):
        assert isinstance(T.reduce_op_for(name), T.ReduceOp)
    assert T.reduce_op_for("avg") == T.ReduceOp.Avg
    assert T.reduce_op_for("ReduceOp.PRODUCT") == T.ReduceOp.Prod
    for op in T.ReduceOp:
        assert T.reduce_op_for(op) is op
        assert T.reduce_op_for(int(op)) is op


class _TorchStyleOp:
    """Stands in for torch.distributed.ReduceOp.AVG: torch numbers it 1, which
    is symmProd in NCCL's numbering; only the name may be used."""

    name = "AVG"

    def __int__(self):
        return 1

    def __index__(self):
        return 1


def test_torch_style_ops_map_by_name_not_number():
    assert T.reduce_op_for(_TorchStyleOp()) == T.ReduceOp.Avg


class _RedOpType:
    """Stands in for torch's RedOpType enum member (it has .name)."""

    def __init__(self, name):
        self.name = name


class _TorchReduceOp:
    """Stands in for a torch.distributed.ReduceOp instance: no .name; it
    pickles as (RedOpType, factor), the factor None but for PREMUL_SUM."""

    def __init__(self, kind, factor=None):
        self._state = (_RedOpType(kind), factor)

    def __getstate__(self):
        return self._state


class _OneElement:
    """Stands in for a one-element tensor (a device factor)."""

    def numel(self):
        return 1

    def data_ptr(self):
        return 0x1000


def test_premul_sum_ops():
    op = T.reduce_op_for(symmcomm.premul_sum(0.5))
    assert isinstance(op, symmcomm.PreMulSum) and op.factor == 0.5
    assert T.reduce_op_for(_TorchReduceOp("PREMUL_SUM", 0.25)).factor == 0.25
    device_factor = _OneElement()
    assert T.reduce_op_for(_TorchReduceOp("PREMUL_SUM", device_factor)).factor is device_factor
    assert T.reduce_op_for(_TorchReduceOp("MAX")) is T.ReduceOp.Max
    assert symmcomm.premul_sum(3).factor == 3
    # Without a factor (the bare name, torch's RedOpType): say how to give one.
    for op in ("PREMUL_SUM", "ReduceOp.PREMUL_SUM", _RedOpType("PREMUL_SUM"), _TorchReduceOp("PREMUL_SUM")):
        with pytest.raises(symmcomm.SymmInvalidArgumentError, match=r"needs its factor: pass symmcomm.premul_sum"):
            T.reduce_op_for(op)
    for bad in (True, "0.5", None, [0.5]):
        with pytest.raises(symmcomm.SymmInvalidArgumentError, match="a number or a one-element tensor"):
            symmcomm.premul_sum(bad)


def test_unsupported_and_unknown_ops():
    for name in ("BAND", "bor", "BXOR"):
        with pytest.raises(symmcomm.SymmNotSupportedError) as e:
            T.reduce_op_for(name)
        assert e.value.code == T.Result.NotSupported
    with pytest.raises(symmcomm.SymmInvalidArgumentError):
        T.reduce_op_for("median")
    with pytest.raises(symmcomm.SymmInvalidArgumentError):
        T.reduce_op_for(5)
