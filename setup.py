"""Build hook only; the project's metadata lives in pyproject.toml.

templates/, static/ and migrations/ sit at the repository's top level but must travel inside the wheel: they
are copied into the ``app`` package at build time, where app/kit/resources.py finds them once installed.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("templates", "static", "migrations")


class BuildWithResources(build_py):
    def run(self) -> None:
        super().run()
        here = Path(__file__).resolve().parent
        for name in BUNDLED:
            source = here / name
            for path in sorted(source.rglob("*")) if source.is_dir() else ():
                if path.is_file() and "__pycache__" not in path.parts:
                    target = Path(self.build_lib) / "app" / name / path.relative_to(source)
                    self.mkpath(str(target.parent))
                    self.copy_file(str(path), str(target))


setup(cmdclass={"build_py": BuildWithResources})
