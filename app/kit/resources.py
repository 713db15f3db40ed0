"""Where specwatch's non-Python files live, from a checkout and from an installed wheel.

The repository keeps ``templates/``, ``static/`` and ``migrations/`` at the top level (DESIGN.md's layout). A
wheel cannot install top-level data directories cleanly, so the build (setup.py) copies them into the ``app``
package; this module looks there first and falls back to the checkout, so both layouts work unchanged.
"""

from __future__ import annotations

from pathlib import Path

# this module lives in app/kit/; the resources sit beside app/__init__.py
PACKAGE_DIR = Path(__file__).resolve().parent.parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
BUNDLED = ("templates", "static", "migrations")


def resource_dir(name: str) -> Path:
    """The directory ``name`` (one of BUNDLED) inside the installed package, else in the checkout."""
    if name not in BUNDLED:
        raise ValueError(f"unknown resource directory {name!r}; known: {', '.join(BUNDLED)}")
    for candidate in (PACKAGE_DIR / name, CHECKOUT_ROOT / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"specwatch's {name}/ directory is missing (looked in {PACKAGE_DIR} and {CHECKOUT_ROOT}); "
        "reinstall the package"
    )


def templates_dir() -> Path:
    return resource_dir("templates")


def static_dir() -> Path:
    return resource_dir("static")


def migrations_dir() -> Path:
    return resource_dir("migrations")
