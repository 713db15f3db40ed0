"""A shell prompt and the command typed after it, where a paste starts (``$ python -m vllm.entrypoints.openai
.api_server ...``, ``[opc@host ray-vllm]$ torchrun ...``, ``root@node:/w# vllm serve ...``): the launch began
there. The command is recognised as the agent's process collector recognises a launcher's command line
(agents/commands.py ``launcher_of``): one reading of what starts an engine or a job, for both."""

from __future__ import annotations

import re
import shlex

from agents.commands import launcher_of

from .values import Fields

Match = tuple[str, str, Fields]

# (a virtualenv's and conda's names in front, then "[user@host dir]", "user@host:dir" or nothing, then $ or #)
_PROMPT = re.compile(
    r"(?:\([\w.-]{1,60}\) ){0,3}(?:\[[^\]\n]{1,120}\]|[\w.-]{1,60}@[\w.-]{1,80}(?::\S{0,200})?)?\s?[$#] (\S.{0,2000})"
)


def launch_command(msg: str) -> Match | None:
    m = _PROMPT.match(msg)
    if m is None:
        return None
    try:
        argv = shlex.split(m[1])
    except ValueError:  # an unclosed quote in a pasted line
        argv = m[1].split()
    launcher = launcher_of(argv)
    if launcher is None:
        return None
    return "launch_command", "info", {"engine": launcher[1], "command": m[1][:256]}
