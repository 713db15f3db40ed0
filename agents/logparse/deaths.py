"""A process's death in the words any supervisor, shell or runtime uses, read by the sentence's structure.

The engines' own death reports are read where they are printed (sglang.py, vllm.py, supervisors.py, torchrun.py).
The wording of the next launcher, the next engine version or a wrapper script is not known in advance, but
the sentence always has the same parts: a subject that is a process (a worker, a rank, an actor, a subprocess,
a pid ...), a verb of dying (died, crashed, was killed, exited ... unexpectedly) and often how (an exit code, a
signal). The C runtime's and the shell's own reports (``Segmentation fault (core dumped)``, ``Fatal Python
error``, a bare ``Killed`` from the OOM killer) need no subject. What is not a death:

- an exit with code 0, or by SIGTERM / SIGINT (somebody stopped it: torchrun's closing signals are read apart);
- "exited" / "terminated" / "failed" with no code or signal: a process that ended, said in the same words as a
  clean shutdown; only a code or a signal makes it a failure.
"""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

# the runtime's and the shell's own words for a process it saw die
_RUNTIME = re.compile(
    r"Segmentation fault|core dumped|Fatal Python error|Bus error \(|Illegal instruction|Floating point exception"
    r"|Memory access fault by GPU"  # ROCm's HSA runtime, aborting the process (vllm#43605)
    r"|MPI_ABORT was invoked"  # MPI's runtime taking the job down (TensorRT-LLM#2813)
    # a fatal signal reported by the process's own handler or its launcher: Triton's "Signal (11) received."
    # (triton-inference-server#6967), abseil's "*** SIGSEGV received at ...", "Caught signal 11", torchrun's
    # "Signal 9 (SIGKILL) received by PID", a segfault handler's banner (ms-swift#8306); never SIGINT / SIGTERM
    r"|\b[Ss]ignal \(?(?:4|6|7|8|9|11)\)? ?(?:\(SIG[A-Z]{3,4}\) )?received"
    r"|\b(?:[Rr]eceived|[Cc]aught) (?:fatal )?signal:? \(?(?:4|6|7|8|9|11|SIG(?:SEGV|ABRT|BUS|ILL|FPE|KILL))\b"
    r"|\bSIG(?:SEGV|ABRT|BUS|ILL|FPE)\b (?:\(@[^)]{1,40}\) )?received|Segfault encountered"
    # a glog / TurboMind CHECK that failed (it logs FATAL and aborts: lmdeploy#4453's "[TM][FATAL] ... Check
    # failed: ..."), a Rust thread's panic (Dynamo's frontend, ai-dynamo/dynamo#5870), Go's runtime panic
    r"|\bCheck failed: |^thread '[^']{0,80}' panicked at |^panic: |^fatal error: all goroutines are asleep"
    # an assertion the runtime aborts on: ggml's GGML_ASSERT (ggml_abort: llama.cpp#18039), C's assert ("file.c:12:
    # f: Assertion `x' failed."), LLVM's unreachable code (llama.cpp's SYCL kernels, llama.cpp#6528)
    r"|\bGGML_ASSERT\(.{0,400}?\) failed|: Assertion [`'].{0,400}?' failed\.|\bUNREACHABLE executed at "
)
_KILLED = re.compile(r"(?:^|line \d{1,6}: +\d{1,10} )Killed\b")
_SUBJECT = (
    r"\b(?:process(?:es)?|worker(?:s)?|rank|actor|child|subprocess|engine|engines|scheduler|pid|proc|replica"
    r"|node|executor|server|job|task|command|container|pod|shard|component|backend|service|daemon)\b"
)
# a subject, then (within the clause) a verb of dying; the rest of the clause may say how
_DEATH = re.compile(
    r"(?:\b(\d{1,7}) )?"
    + _SUBJECT
    # (a dot inside a token, an address's or a version's, does not end the clause; one before a space does)
    + r"(?:[^.;!?\n]|\.(?=\S)){0,160}?\b(died|crashed|was killed|were killed|got killed|is dead|are dead"
    r"|(?:has been|was|were) marked (?:as )?dead|was signaled to shut ?down"
    r"|exited unexpectedly|exit unexpectedly|terminated unexpectedly|returned a non-zero exit code"
    r"|failed to start|exited|terminated|failed)\b([^;\n]{0,100})",
    re.IGNORECASE,
)
_CODE = re.compile(
    r"(?:exit ?code|exitcode|return ?code|returncode|exit status|\brc|\bwith code)\s{0,3}(?:=|:|is|of)?\s{0,3}(-?\d{1,4})"
    r"|signal\s{0,3}[:=]?\s{0,3}(\d{1,2}\b|SIG[A-Z]{2,6})"
    r"|\b(SIG(?:KILL|SEGV|ABRT|BUS|FPE|ILL|TERM|INT|QUIT|HUP))\b"
    # Go's os/exec: "signal: killed", "signal: segmentation fault" (Ollama's "llama runner process has terminated:
    # signal: killed", ollama#9685)
    r"|signal: (killed|segmentation fault|aborted|bus error|illegal instruction|floating point exception"
    r"|terminated|interrupt|hangup|quit)\b",
    re.IGNORECASE,
)
_GO_SIGNALS = {"killed": "SIGKILL", "segmentation fault": "SIGSEGV", "aborted": "SIGABRT", "bus error": "SIGBUS",
               "illegal instruction": "SIGILL", "floating point exception": "SIGFPE", "terminated": "SIGTERM",
               "interrupt": "SIGINT", "hangup": "SIGHUP", "quit": "SIGQUIT"}  # fmt: skip
# which process the subject names: "process rank 6 with PID 0" (mpirun), "worker pid=4512", "Rank 3 died"
# (TGI's shards are its tensor-parallel ranks: "Shard 0 failed to start")
_NAMED_RANK = re.compile(r"\b(?:rank|shard)\s{0,2}[:=#]?\s{0,2}(\d{1,5})\b", re.IGNORECASE)
_NAMED_PID = re.compile(r"\bpid\s{0,2}[:=]?\s{0,2}([1-9]\d{1,8})\b", re.IGNORECASE)
# or the command line it was started with ("['python3', '-u', 'main.py', '--local_rank=1', ...]": DeepSpeed's)
_NAMED_LOCAL = re.compile(r"--local[_-]rank[= ]'?(\d{1,5})\b|\blocal_rank[:=] ?(\d{1,5})\b")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "15", "2"})
_HINTS = (
    "ignal",
    "SIG",
    "Check failed",
    "UNREACHABLE",
    "panic",
    "goroutines",
    "Memory access",
    "MPI_ABORT",
    "non-zero",
    "died",
    "rash",
    "kill",
    "Kill",
    "xit",
    "ermin",
    "ault",
    "dumped",
    "Fatal",
    "dead",
    "signaled",
    "ailed",
    "rror (",
    "nstruction",
)


def process_death(msg: str) -> Match | None:
    """``("child_crashed", "critical", fields)`` when ``msg`` says a process died (``launcher_stopping`` for the
    terminal's ``^C``: somebody stopped it); None otherwise."""
    head = msg[:400]
    if head.startswith("^C"):
        # the terminal echoing the user's Ctrl-C: what dies after it was stopped (lmdeploy#318)
        return "launcher_stopping", "warning", {"signal": "SIGINT", "how": "terminal interrupt"}
    if not any(h in head for h in _HINTS):
        return None
    m = _RUNTIME.search(head)
    if m is not None:
        cause = m.group(0).lower()[:48]  # (an assertion quotes its test: keep its head)
        return "child_crashed", "critical", {"cause": cause}
    if _KILLED.match(head.strip()):
        return "child_crashed", "critical", {"cause": "killed", "exit_code": -9}
    # each clause with a process subject and a verb of dying in turn: "Primary job terminated normally, but 1
    # process returned a non-zero exit code" is a death in its second. A class name's words count as words
    # ("WorkerProc failed to start", vllm#26328: a worker process)
    head = _CAMEL.sub(" ", head)
    pos = 0
    while (d := _DEATH.search(head, pos)) is not None:
        hit = _death(head, d)
        if hit is not None:
            return hit
        pos = d.end(2)  # the next clause may begin inside this one's tail
    return None


def _death(head: str, d: re.Match[str]) -> Match | None:
    if d.group(1) == "0":
        return None  # "0 Workers ... killed": a count of none (Ray's memory monitor says it each period)
    verb = d.group(2).lower()
    code = _CODE.search(d.group(0))
    fields: Fields = {"cause": verb}
    fields.update(subject_fields(head[: d.start(2)]))  # the words before the verb name the process
    failed = verb not in ("exited", "terminated", "failed")  # died, crashed, killed, ... unexpectedly
    if code is not None:
        if code.group(1) is not None:
            n = int(code.group(1))
            if n == 0:
                return None
            fields["exit_code"] = n
            failed = True
        else:
            sig = (code.group(2) or code.group(3) or _GO_SIGNALS[code.group(4).lower()]).upper()
            if sig in _STOP_SIGNALS:
                return None
            fields["signal"] = sig
            failed = True
    return ("child_crashed", "critical", fields) if failed else None


def subject_fields(subject: str) -> Fields:
    """Which process the subject of a death names: its rank, its local rank (from its command line), its pid."""
    fields: Fields = {}
    if (rank := _NAMED_RANK.search(subject)) is not None:
        fields["rank_index"] = int(rank.group(1))
    if (local := _NAMED_LOCAL.search(subject, 0, 4000)) is not None:
        fields["local_rank"] = int(local.group(1) or local.group(2))
    if (pid := _NAMED_PID.search(subject)) is not None:
        fields["pid"] = int(pid.group(1))
    return fields
