"""Library discovery: each step on its own, in order, and the message that
explains every failed step."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import symmcomm
from symmcomm import _library as L

NONE = ("libsymmcomm-does-not-exist.so.9",)


def discover(**kw):
    kw.setdefault("environ", {})
    kw.setdefault("system_names", NONE)
    return L.discover(**kw)


@pytest.fixture
def empty_pkg(tmp_path):
    d = tmp_path / "pkg"
    d.mkdir()
    return d


def test_explicit_path_wins(built_library, tmp_path, empty_pkg):
    repo = tmp_path / "repo"
    (repo / "target" / "release").mkdir(parents=True)
    shutil.copy(built_library, repo / "target" / "release" / "libsymmcomm.so")
    path, lib = discover(environ={"SYMMCOMM_LIBRARY": str(built_library)}, package_dir=empty_pkg,
                         repository_roots=[repo])
    assert path == str(built_library.resolve())
    assert hasattr(lib, "symmGetVersion")


def test_explicit_path_missing_is_final(built_library, tmp_path, empty_pkg):
    # An explicit choice never falls back to another library, even a good one.
    repo = tmp_path / "repo"
    (repo / "target" / "release").mkdir(parents=True)
    shutil.copy(built_library, repo / "target" / "release" / "libsymmcomm.so")
    with pytest.raises(symmcomm.LibraryNotFoundError) as e:
        discover(environ={"SYMMCOMM_LIBRARY": str(tmp_path / "nope.so")}, package_dir=empty_pkg,
                 repository_roots=[repo])
    msg = str(e.value)
    assert "SYMMCOMM_LIBRARY=" in msg and "nope.so" in msg and "does not exist" in msg
    assert "unset it" in msg


def test_explicit_path_not_symmcomm(tmp_path, empty_pkg):
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6") if os.path.exists(p)), None)
    if libm is None:
        pytest.skip("no libm.so.6 at a known path")
    with pytest.raises(symmcomm.LibraryNotFoundError) as e:
        discover(environ={"SYMMCOMM_LIBRARY": libm}, package_dir=empty_pkg, repository_roots=[])
    assert "not symmcomm (no symmGetVersion)" in str(e.value)


def test_explicit_path_not_a_library(tmp_path, empty_pkg):
    bogus = tmp_path / "libsymmcomm.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(symmcomm.LibraryNotFoundError) as e:
        discover(environ={"SYMMCOMM_LIBRARY": str(bogus)}, package_dir=empty_pkg, repository_roots=[])
    assert "dlopen failed" in str(e.value)


def test_package_copy_second(built_library, tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "lib").mkdir(parents=True)
    shutil.copy(built_library, pkg / "lib" / "libsymmcomm.so")
    repo = tmp_path / "repo"
    (repo / "target" / "release").mkdir(parents=True)
    shutil.copy(built_library, repo / "target" / "release" / "libsymmcomm.so")
    path, _ = discover(package_dir=pkg, repository_roots=[repo])
    assert path == str(pkg / "lib" / "libsymmcomm.so")


def test_repository_build_third(built_library, tmp_path, empty_pkg):
    repo = tmp_path / "repo"
    (repo / "target" / "release").mkdir(parents=True)
    shutil.copy(built_library, repo / "target" / "release" / "libsymmcomm.so")
    path, _ = discover(package_dir=empty_pkg, repository_roots=[tmp_path / "other", repo])
    assert path == str(repo / "target" / "release" / "libsymmcomm.so")


def test_broken_copy_falls_through_with_reason(built_library, tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "lib" / "libsymmcomm.so").write_text("garbage")
    repo = tmp_path / "repo"
    (repo / "target" / "release").mkdir(parents=True)
    shutil.copy(built_library, repo / "target" / "release" / "libsymmcomm.so")
    path, _ = discover(package_dir=pkg, repository_roots=[repo])
    assert path.startswith(str(repo))


def test_system_fourth(built_library, tmp_path, repo_root):
    # The dynamic loader's search path is fixed at process start: use a child.
    libdir = tmp_path / "sys"
    libdir.mkdir()
    shutil.copy(built_library, libdir / "libsymmcomm.so.0")
    code = (
        "from symmcomm import _library as L; from pathlib import Path\n"
        f"path, lib = L.discover(environ={{}}, package_dir=Path({str(tmp_path / 'nopkg')!r}), repository_roots=[])\n"
        "print(path)\n"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), PYTHONPATH=str(repo_root / "python"))
    env.pop("SYMMCOMM_LIBRARY", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str((libdir / "libsymmcomm.so.0").resolve())


def test_every_step_explained(tmp_path, empty_pkg):
    with pytest.raises(symmcomm.LibraryNotFoundError) as e:
        discover(package_dir=empty_pkg, repository_roots=[tmp_path / "repo"])
    msg = str(e.value)
    lines = msg.splitlines()
    assert lines[0].startswith("could not load libsymmcomm")
    steps = [ln.strip() for ln in lines[1:]]
    assert steps[0] == "1. SYMMCOMM_LIBRARY: not set"
    assert steps[1].startswith("2. the package's own copy") and str(empty_pkg / "lib" / "libsymmcomm.so") in steps[1]
    assert steps[2].startswith("3. the source repository's build") and "scripts/setup" in steps[2]
    assert str(tmp_path / "repo" / "target" / "release" / "libsymmcomm.so") in steps[2]
    assert steps[3].startswith("4. the system's") and NONE[0] in steps[3] and "LD_LIBRARY_PATH" in steps[3]
    assert isinstance(e.value, OSError) and isinstance(e.value, symmcomm.SymmError)


def test_no_repository_known(tmp_path, empty_pkg):
    with pytest.raises(symmcomm.LibraryNotFoundError) as e:
        discover(package_dir=empty_pkg, repository_roots=[])
    assert "no source repository is known" in str(e.value)


def test_default_search_finds_this_checkout(built_library, repo_root, monkeypatch):
    # Imported from the checkout, step 3 looks in this repository's target/release.
    roots = L._repository_roots()
    assert repo_root in roots
    monkeypatch.delenv("SYMMCOMM_LIBRARY", raising=False)
    if not (repo_root / "target" / "release" / "libsymmcomm.so").is_file():
        pytest.skip("SYMMCOMM_LIBRARY points elsewhere and target/release has no build")
    path, _ = L.discover()
    assert Path(path) == repo_root / "target" / "release" / "libsymmcomm.so"


def test_library_object(lib, built_library):
    assert lib.version == symmcomm.__version__
    assert lib.version_code == 100 * int(lib.version.split(".")[1]) + int(lib.version.split(".")[2])
    assert repr(lib).startswith("SymmLibrary(")
    for f in L.FUNCTIONS:
        assert lib.has(f.name), f.name
    assert lib.missing == []
