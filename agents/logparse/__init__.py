"""Pure engine-log parser: SGLang, vLLM, PyTorch ProcessGroupNCCL, NCCL, Ascend NPU and TensorRT-LLM lines ->
``wire.Event``.

Event kinds and their fields are listed in docs/architecture.md.
"""

from collections.abc import Iterable

from agents.wire import Event

from .parser import LogParser

__all__ = ["LogParser", "parse_lines"]


def parse_lines(lines: Iterable[str], **kw: object) -> list[Event]:
    """Parse a whole log (an iterable of lines) and flush: the convenience form of ``LogParser``."""
    parser = LogParser(**kw)  # type: ignore[arg-type]
    out: list[Event] = []
    for line in lines:
        out += parser.feed(line)
    out += parser.flush()
    return out
