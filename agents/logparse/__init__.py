"""Pure engine-log parser: SGLang, vLLM, PyTorch ProcessGroupNCCL, NCCL, Ascend NPU and TensorRT-LLM lines ->
``wire.Event``.

Event kinds and their fields are listed in docs/architecture.md.
"""

from .parser import LogParser, parse_lines

__all__ = ["LogParser", "parse_lines"]
