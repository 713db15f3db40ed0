"""Crash reports of the processes that supervise the workers, not the workers themselves: Ray's raylet and
vLLM's engine-core client. Each says a worker died without naming it (torchrun's agent: agents/logparse/torchrun.py)."""

from __future__ import annotations

import re

from .deaths import subject_fields
from .prompt import launch_command
from .values import Fields

Match = tuple[str, str, Fields]

# Ray's memory monitor: "1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed ..."
_RAY_OOM = re.compile(r"(\d{1,7}) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)")

_RAY_DIED = (
    "A worker died or was killed while executing a task",
    "The actor is dead because its worker process has died",
    "The actor died unexpectedly before finishing this task",
    "ray.exceptions.ActorDiedError:",
)
_LMDEPLOY_DIED = ("Engine loop failed with error", "Task <EngineMainLoop> failed")
_RETURN_CODE = re.compile(r"exits with return code = (-?\d{1,4})$")
_EXIT_TYPE = re.compile(r"Worker exit type: (\w{1,40})")


# Ray waiting for the resources a replica, actor or task asked for: nothing of it starts until they come (Ray
# Serve's controller, rayllm#143; Ray core's and the autoscaler's own warnings)
_RAY_UNSCHEDULED = re.compile(
    r"replicas? that (?:have|has) taken more than (\d{1,6})s to be scheduled"
    r"|The following resource request cannot be scheduled right now"
    r"|No available node types can fulfill resource request"
)

_SHARD_WAIT = re.compile(r"Waiting for shard (\d{1,5}) to be ready")


def supervisor_message(msg: str) -> Match | None:
    if "schedul" in msg[:400] or "fulfill resource" in msg[:400]:
        m = _RAY_UNSCHEDULED.search(msg, 0, 400)
        if m and m.group(0).startswith("No available node types"):
            # infeasible, not pending: no node type the cluster has or could add fits it (a placement group
            # pinned to a node IP Ray does not know, vllm#7815; eight GPUs asked of nodes that have fewer)
            return "unschedulable", "error", {"engine": "ray"}
        if m:
            wait: Fields = {"engine": "ray"}
            if m.group(1):
                wait["waited_s"] = int(m.group(1))
            return "placement_wait", "warning", wait
    if "killed due to memory pressure" in msg:
        m = _RAY_OOM.search(msg, 0, 400)
        if m and int(m.group(1)) > 0:
            return (
                "child_crashed",
                "critical",
                {"engine": "ray", "cause": "host_oom", "killed": int(m.group(1))},
            )
    elif msg.startswith(_RAY_DIED):
        # Ray's raylet and driver: a worker process or an actor's process exited unexpectedly (SIGKILL, the OOM
        # killer, a segfault); the lines name Ray's ids, not the engine's rank (verl#472, #4921, lmdeploy#3343)
        m = _EXIT_TYPE.search(msg, 0, 2000)
        return "child_crashed", "critical", {"engine": "ray", "cause": (m.group(1) if m else "worker died")}
    elif msg.startswith(_LMDEPLOY_DIED):
        # lmdeploy's PyTorch engine: its main loop raised, the engine is gone (lmdeploy#2471, #3459)
        return "child_crashed", "critical", {"engine": "lmdeploy", "process": "engine loop"}
    elif "exits with return code = " in msg[-60:] and (rc := _RETURN_CODE.search(msg, max(0, len(msg) - 60))):
        # DeepSpeed's launcher: a worker process exited non-zero (deepspeed#3232: -9, the OOM killer)
        if int(rc.group(1)) != 0:
            # the message is the worker's command line: its --local_rank says which worker it was
            fields: Fields = {"engine": "deepspeed", "exit_code": int(rc.group(1))}
            return "child_crashed", "critical", {**fields, **subject_fields(msg[: rc.start()])}
    elif msg.startswith("Killing subprocess ") and msg[19:].strip().isdigit():
        # DeepSpeed's launcher tearing its workers down (its sigkill_handler): after one exited non-zero, or
        # when the launcher itself was stopped; torchrun's "Sending process N closing signal" is the same act
        return "closing_signal", "info", {"pid": int(msg[19:].strip()), "launcher": "deepspeed"}
    elif msg.startswith("Waiting for shard ") and (shard := _SHARD_WAIT.match(msg)) is not None:
        # TGI's launcher, every 10 s until the shard's server reports ready: the launch is starting
        return "engine_wait", "info", {"engine": "tgi", "shard": int(shard.group(1))}
    elif msg.startswith("Got fatal signal from worker processes"):
        return "child_crashed", "critical", {"engine": "vllm", "process": "worker processes"}
    elif "$ " in msg[:200] or "# " in msg[:200]:
        return launch_command(msg)  # the shell that started the launch, where a paste begins
    return None
