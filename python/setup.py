"""Install hook for the pure-Python package (metadata is in pyproject.toml).

At build time it records which source repository the package came from, so
that an installed copy finds that checkout's target/release/libsymmcomm.so,
and, when SYMMCOMM_BUNDLE_LIBRARY names a built library, copies it into the
package (symmcomm/lib/libsymmcomm.so) so the package carries its own.
"""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class BuildPy(build_py):
    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "symmcomm"
        repo = str(REPO) if (REPO / "Cargo.toml").is_file() else ""
        (pkg / "_install_info.py").write_text(
            '"""Written by python/setup.py when the package was built."""\n'
            f"SOURCE_REPOSITORY = {repo!r}\n"
        )
        bundle = os.environ.get("SYMMCOMM_BUNDLE_LIBRARY")
        # build/ outlives a build: never let an earlier bundle ride along.
        shutil.rmtree(pkg / "lib", ignore_errors=True)
        if bundle:
            if not Path(bundle).is_file():
                raise SystemExit(f"SYMMCOMM_BUNDLE_LIBRARY={bundle}: no such file")
            (pkg / "lib").mkdir(exist_ok=True)
            shutil.copy2(bundle, pkg / "lib" / "libsymmcomm.so")


setup(cmdclass={"build_py": BuildPy})
