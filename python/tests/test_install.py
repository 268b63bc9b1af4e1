"""`pip install ./python` as the README prints it (into a scratch folder):
the installed package imports without torch, carries the library when
built with SYMMCOMM_BUNDLE_LIBRARY, records this checkout, and without the
carried copy finds this checkout's target/release from anywhere."""

import os
import subprocess
import sys

import pytest


def pip_install(repo_root, target, extra_env=None):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", **(extra_env or {}))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                          str(repo_root / "python")], capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0 and ("Could not find a version" in out.stderr or "NewConnectionError" in out.stderr):
        pytest.skip(f"pip cannot reach a package index for the build backend: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, out.stdout + out.stderr
    return target


def run_installed(target, code, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("SYMMCOMM_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")


def test_pip_install(repo_root, built_library, tmp_path):
    site = pip_install(repo_root, tmp_path / "site", {"SYMMCOMM_BUNDLE_LIBRARY": str(built_library)})
    carried = site / "symmcomm" / "lib" / "libsymmcomm.so"
    assert carried.is_file(), "SYMMCOMM_BUNDLE_LIBRARY did not put the library in the package"
    code = ("import sys, symmcomm, symmcomm._install_info as info\n"
            "print(symmcomm.__file__); print(info.SOURCE_REPOSITORY); print(symmcomm.library_path())\n"
            "print('torch' in sys.modules)\n")
    file, repo, lib, torch_loaded = run_installed(site, code, cwd=tmp_path)[:4]
    assert file.startswith(str(site))
    assert repo == str(repo_root)
    assert lib == str(carried)  # step 2: the package's own copy
    assert torch_loaded == "False"
    carried.unlink()
    if (repo_root / "target" / "release" / "libsymmcomm.so").is_file():
        # step 3: the checkout it was installed from, found from anywhere
        lib = run_installed(site, "import symmcomm; print(symmcomm.library_path())", cwd=tmp_path)[0]
        assert lib == str(repo_root / "target" / "release" / "libsymmcomm.so")
