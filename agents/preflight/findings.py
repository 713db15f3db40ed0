"""What a preflight check reports: a finding with a severity, what the engine will do, and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}
EXIT_CODES: dict[str, int] = {"error": 2, "warning": 1, "info": 0}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem (or note) about a draft checkpoint.

    ``code`` is stable (scripts and the acceptance diagnosis match on it); ``title`` says what is wrong in
    one line; ``effect`` what the engine will do about it; ``fix`` the exact change. ``keys`` are the tensor
    keys involved and ``renames`` the exact key renames that fix them, when the fix is a rename.
    """

    code: str
    severity: Severity
    title: str
    effect: str = ""
    fix: str = ""
    keys: tuple[str, ...] = ()
    renames: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["keys"] = list(self.keys)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Finding:
        return Finding(
            code=str(d.get("code", "unknown")),
            severity=d.get("severity", "warning") if d.get("severity") in SEVERITY_ORDER else "warning",
            title=str(d.get("title", "")),
            effect=str(d.get("effect", "")),
            fix=str(d.get("fix", "")),
            keys=tuple(str(k) for k in d.get("keys") or ()),
            renames={str(k): str(v) for k, v in (d.get("renames") or {}).items()},
        )


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when clean (notes only), 1 with warnings, 2 with errors: what CI gates on."""
    return max((EXIT_CODES[f.severity] for f in findings), default=0)


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = {"error": 0, "warning": 0, "info": 0}
    for f in findings:
        out[f.severity] += 1
    return out


def summary_line(findings: Iterable[Finding]) -> str:
    c = counts(findings)
    parts = [f"{c[s]} {s}{'' if c[s] == 1 else 's'}" for s in ("error", "warning") if c[s]]
    return ", ".join(parts) if parts else "no problems found"


def key_sample(keys: tuple[str, ...], limit: int = 4) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def as_text(findings: Iterable[Finding], limit: int = 8000) -> str:
    """A compact plain-text rendering (the agent's ``draft_preflight`` event message)."""
    lines = []
    for f in sort_findings(findings):
        lines.append(f"{f.severity.upper()} [{f.code}] {f.title}")
        if f.effect:
            lines.append(f"  engine: {f.effect}")
        if f.fix:
            lines.append(f"  fix: {f.fix}")
        if f.keys:
            lines.append(f"  keys: {key_sample(f.keys)}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 1] + "…"
