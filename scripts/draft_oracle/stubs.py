"""Import stubs for the oracle: GPU-only packages an engine's model module imports at module level but that
the draft's construction and ``load_weights`` never call on the CPU.

Only the top-level packages named in ``STUBBED`` are replaced, and only when they are not installed. A stub
module answers every attribute with a placeholder class (subclassable, callable, usable as a decorator) so the
``from x import y`` lines succeed. Nothing here touches parameter names: the draft's modules, their
parameter names and the engine's ``load_weights`` / weight loaders all run from the engine's own wheel.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED: set[str] = set()
USED: set[str] = set()


class _Placeholder(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # used as a decorator (@stub or @stub(...)): hand the function back unchanged
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _placeholder(f"{cls.__name__}()")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __bool__(cls) -> bool:
        return False


def _placeholder(name: str) -> Any:
    return _Placeholder(name.rsplit(".", 1)[-1] or "stub", (), {"__module__": "stub"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = next((n for n in STUBBED if fullname == n or fullname.startswith(n + ".")), None)
        if top is None:
            return None
        USED.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        mod = _StubModule(spec.name)
        mod.__path__ = []  # a package, so submodules import too
        mod.__version__ = "0.0.0"  # version checks (transformers' is_*_available) read this
        return mod

    def exec_module(self, module: Any) -> None:
        return None


def install(names: list[str]) -> None:
    """Stub each top-level package in ``names`` that is not installed."""
    for n in names:
        if "." in n or (
            n not in sys.modules and importlib.util.find_spec(n) is None
        ):  # a compiled extension inside an engine package (e.g. vllm._C): stubbed as named
            STUBBED.add(n)
    sys.meta_path.append(_Finder())
