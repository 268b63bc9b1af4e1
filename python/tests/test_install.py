"""`pip install ./python` as the README prints it (into a scratch folder):
the installed package imports without torch, records this checkout, and
finds its target/release library from anywhere; with
SYMMCOMM_BUNDLE_LIBRARY it carries its own copy."""

import os
import subprocess
import sys

import pytest


def pip_install(repo_root, target, extra_env=None):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", **(extra_env or {}))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                          str(repo_root / "python")], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0 and ("Could not find a version" in out.stderr or "NewConnectionError" in out.stderr):
        pytest.skip(f"pip cannot reach a package index for the build backend: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, out.stdout + out.stderr
    return target


def run_installed(target, code, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("SYMMCOMM_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def test_pip_install_finds_this_checkout(repo_root, built_library, tmp_path):
    if built_library != repo_root / "target" / "release" / "libsymmcomm.so":
        pytest.skip("SYMMCOMM_LIBRARY points away from target/release")
    site = pip_install(repo_root, tmp_path / "site")
    code = ("import sys, symmcomm, symmcomm._install_info as info\n"
            "print(symmcomm.__file__); print(info.SOURCE_REPOSITORY); print(symmcomm.library_path())\n"
            "print('torch' in sys.modules)\n")
    out = run_installed(site, code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    file, repo, lib, torch_loaded = out.stdout.split("\n")[:4]
    assert file.startswith(str(site))
    assert repo == str(repo_root)
    assert lib == str(repo_root / "target" / "release" / "libsymmcomm.so")
    assert torch_loaded == "False"


def test_pip_install_can_carry_the_library(repo_root, built_library, tmp_path):
    site = pip_install(repo_root, tmp_path / "site", {"SYMMCOMM_BUNDLE_LIBRARY": str(built_library)})
    carried = site / "symmcomm" / "lib" / "libsymmcomm.so"
    assert carried.is_file()
    out = run_installed(site, "import symmcomm; print(symmcomm.library_path(), symmcomm.library_version())",
                        cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == str(carried)
