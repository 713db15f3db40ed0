"""``specwatch agent``: the host agent's command line. Registered by app/cli/main.py through COMMANDS.

Errors in the configuration print one sentence and exit with code 2; nothing is started.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.collectors import SOURCES, ConfigError, parse_sources

if TYPE_CHECKING:
    from agents.main import Agent
    from agents.spool.store import Spool

log = logging.getLogger("specwatch.agent")


def default_spool(host: str | None = None) -> Path:
    env = os.environ.get("SPECWATCH_SPOOL")
    if env:
        base = Path(env)
    elif os.geteuid() == 0:
        base = Path("/var/lib/specwatch/agent")
    else:
        base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "specwatch/agent"
    # simulated hosts on one machine each need their own identity and sequence
    return base / f"sim-{host}" if host else base


def validate(args: argparse.Namespace) -> None:
    from agents import wire  # here, not at the top: `specwatch agent --help` need not load pydantic

    if not args.server or not re.match(r"^https?://[^/\s]+", args.server):
        raise ConfigError(
            f"--server must be an http(s) URL such as http://specwatch:8000, not {args.server!r}"
        )
    if not args.token:
        raise ConfigError(
            "no token: pass --token or set SPECWATCH_TOKEN (create one with `specwatch token create`)"
        )
    if args.interval <= 0 or args.interval > 3600:
        raise ConfigError(f"--interval must be between 0 and 3600 seconds, not {args.interval}")
    if args.batch_interval < args.interval:
        raise ConfigError(
            f"--batch-interval ({args.batch_interval}) must be at least --interval ({args.interval})"
        )
    if args.time_scale <= 0:
        raise ConfigError(f"--time-scale must be positive, not {args.time_scale}")
    if args.spool_max_mb <= 0:
        raise ConfigError(f"--spool-max-mb must be positive, not {args.spool_max_mb}")
    if args.host is not None and not wire.is_host_name(args.host):
        raise ConfigError(f"--host {args.host!r} may only use letters, digits and . _ : -")
    if args.deployment is not None and not wire.is_deployment_name(args.deployment):
        raise ConfigError(f"--deployment {args.deployment!r} may only use letters, digits and . _ : / -")
    if not args.simulate and not args.deployment:
        raise ConfigError("--deployment NAME is required (the engine service this host runs)")


def build(args: argparse.Namespace) -> tuple[Agent, Spool]:
    """The Agent and its spool, from validated arguments. Raises ConfigError with one sentence."""
    from agents import wire
    from agents.main import Agent, AgentConfig
    from agents.shipper import Shipper
    from agents.sources import Build, collectors
    from agents.spool.store import Spool, SpoolBusy

    chosen = parse_sources(args.sources)
    t0 = time.time()
    cluster, sim_host, host, deployment = _simulation(args, t0) if args.simulate else (None, "", None, None)
    host = args.host or host or socket.gethostname().split(".")[0]
    deployment = args.deployment or deployment
    if not wire.is_host_name(host):
        raise ConfigError(f"host name {host!r} is not usable: pass --host NAME")
    spool_dir = Path(args.spool) if args.spool else default_spool(host if cluster is not None else None)
    try:
        spool = Spool(spool_dir, max_bytes=int(args.spool_max_mb * 1024 * 1024))
    except SpoolBusy as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot use spool directory {spool_dir}: {exc.strerror or exc}") from exc
    if args.launch:  # the engine's output, written by the agent itself (its logs row follows it)
        from agents.launcher import launch_log_path

        launch_dir = Path(args.launch_log_dir) if args.launch_log_dir else spool_dir / "launch-logs"
        args.launch_log = launch_log_path(launch_dir, deployment or "engine", t0)
    simulated = set() if cluster is None else parse_sources(args.sim_sources)
    try:
        found = collectors(Build(args, host, spool_dir, simulated, cluster, sim_host, t0), chosen)
    except ConfigError:
        spool.close()
        raise
    config = AgentConfig(
        host=host,
        deployment=deployment or "",
        interval_s=args.interval,
        batch_interval_s=args.batch_interval,
        duration_s=args.duration,
        drain_timeout_s=args.drain_timeout,
    )
    agent = Agent(config, spool, Shipper(spool, args.server, args.token), found)
    if getattr(args, "record", None):
        from agents.recording import Recorder

        agent.recorder = Recorder(Path(args.record))
    return agent, spool


def _simulation(args: argparse.Namespace, t0: float) -> tuple[Any, str, str, str]:
    """``--simulate``: the simulated cluster, the host this agent plays in it, its name and its deployment."""
    from agents.simulate import load_cluster

    try:
        scenario, cluster = load_cluster(args.simulate, args.time_scale, args.sim_seed, t0=t0)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    sim_hosts = list(scenario.hosts)
    sim_host = args.sim_host or sim_hosts[0]
    if sim_host not in sim_hosts:
        raise ConfigError(
            f"--sim-host {sim_host!r} is not in scenario {args.simulate!r}: {', '.join(sim_hosts)}"
        )
    return cluster, sim_host, sim_host, scenario.deployment


def cmd_agent(args: argparse.Namespace) -> int:
    args.token = args.token or os.environ.get("SPECWATCH_TOKEN", "")
    try:
        validate(args)
        agent, spool = build(args)
    except ConfigError as exc:
        print(f"specwatch agent: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    session = None
    if args.launch:
        from agents.launcher import EngineLauncher, LaunchError, LaunchSession, echo_stream

        command = list(args.launch)
        settle = 2 * args.batch_interval + args.interval  # the exit and the last lines reach a batch
        try:
            session = LaunchSession(EngineLauncher(command, args.launch_log, echo=echo_stream()), settle)
            pid = session.start(agent.finish, stop)
        except LaunchError as exc:
            spool.close()
            print(f"specwatch agent: {exc}", file=sys.stderr)
            return 2
        log.info("launched %s (pid %d); its output: %s", " ".join(command), pid, args.launch_log)
        if agent.processes is not None and hasattr(agent.processes.backend, "scope_pid"):
            agent.processes.backend.scope_pid = pid  # its ranks, not a neighbour's

    def on_signal(signum: int, _frame: Any) -> None:
        if session is not None:
            name = signal.Signals(signum).name
            log.info("%s received: passing it to the engine", name)
            if session.launcher.poll() is None:
                from agents import wire  # loaded already by the agent's build

                # the stop was asked for: the exits that follow end the launch, they are no crash
                agent.note(
                    wire.Event(
                        ts=time.time(),
                        kind=wire.EventKind.LAUNCHER_STOPPING,
                        message=f"the agent passed {name} to the engine it launched (a requested stop)",
                        severity="warning",
                        source="agent",
                        fields={"signal": name},
                    )
                )
            session.on_signal(signum, stop)
            return
        log.info("%s received: spooling the current batch and exiting", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        code = int(agent.run(stop))
        return session.exit_status() if session is not None else code
    finally:
        spool.close()


def parse(argv: list[str]) -> argparse.Namespace:
    """``specwatch agent`` arguments as a Namespace, for running an agent in-process (the demo):
    ``agent, spool = build(parse([...])); agent.run(stop_event)``; validate() first for user input."""
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers())
    args = parser.parse_args(["agent", *argv])
    args.token = args.token or os.environ.get("SPECWATCH_TOKEN", "")
    return args


def register(sub: Any) -> None:
    p = sub.add_parser(
        "agent",
        help="run the host agent: sample GPUs, engine processes, logs and metrics; ship them to the server",
        description="Run on every GPU host next to the engine. Batches are spooled to disk before sending, "
        "so a server outage loses nothing up to the spool bound.",
    )
    p.add_argument("--server", required=True, help="specwatch server URL, e.g. http://specwatch:8000")
    p.add_argument(
        "--token", help="agent token for this host (better: the SPECWATCH_TOKEN environment variable)"
    )
    p.add_argument(
        "--deployment", help="engine service name, e.g. kimi-k25-eagle3 (scenario's own with --simulate)"
    )
    p.add_argument("--host", help="this host's name as the server knows it (default: the short hostname)")
    p.add_argument(
        "--log", action="append", metavar="PATH", help="engine log file or glob to follow (repeatable)"
    )
    p.add_argument(
        "--log-tz", default="local", help="time zone of the engine's log timestamps (default: local)"
    )
    p.add_argument(
        "--engine-metrics",
        metavar="URL",
        help="engine Prometheus endpoint, e.g. http://127.0.0.1:30000/metrics",
    )
    p.add_argument(
        "--metrics-interval", type=float, default=2.0, help="seconds between /metrics scrapes (default 2)"
    )
    p.add_argument(
        "--spool", help="spool directory (default: SPECWATCH_SPOOL, /var/lib/specwatch/agent as root)"
    )
    p.add_argument(
        "--spool-max-mb", type=float, default=1024.0, help="spool bound; oldest batches dropped beyond it"
    )
    p.add_argument("--interval", type=float, default=1.0, help="sampling period in seconds (default 1)")
    p.add_argument("--batch-interval", type=float, default=2.0, help="seconds between batches (default 2)")
    p.add_argument(
        "--sources",
        default="all",
        help=f"collectors to run, comma-separated from {','.join(SOURCES)}; 'all' (default) or 'none'",
    )
    p.add_argument(
        "--proc-root", default="/proc", help="procfs mount to read (e.g. the host's /proc in a container)"
    )
    p.add_argument(
        "--select",
        action="append",
        metavar="KIND:VALUE",
        help="watch only the engines this names (repeatable): pid:N, unit:NAME.service, cgroup:TEXT, "
        "container:ID, cmd:REGEX, env:KEY=VALUE; default: every engine as root, your own otherwise "
        "(docs/agent.md)",
    )
    p.add_argument("--ras", default="127.0.0.1:28028", help="NCCL RAS address to probe, or 'off'")
    p.add_argument("--duration", type=float, help="stop after this many seconds, then send what is spooled")
    p.add_argument(
        "--drain-timeout", type=float, default=30.0, help="with --duration: how long to keep sending"
    )
    p.add_argument(
        "--launch",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="start the engine command itself (last, after --) and follow its output; the agent exits with "
        "the engine's exit code (docs/cluster.md)",
    )
    p.add_argument(
        "--record",
        metavar="FILE",
        help="also write every batch to FILE (gzip, one JSON batch a line): a recording for `specwatch eval "
        "--recordings`",
    )
    p.add_argument(
        "--launch-log-dir", help="where --launch writes the engine's output (default: SPOOL/launch-logs)"
    )
    g = p.add_argument_group("simulation (no GPU needed)")
    g.add_argument(
        "--simulate", metavar="SCENARIO", help="read a simulated cluster instead of NVML, /proc and HTTP"
    )
    g.add_argument("--sim-host", help="which simulated host this agent is (default: the scenario's first)")
    g.add_argument(
        "--time-scale", type=float, default=1.0, help="compress the scenario's durations (0.1 = 10x faster)"
    )
    g.add_argument("--sim-seed", type=int, default=0, help="simulation seed")
    g.add_argument(
        "--sim-log-dir", help="where the simulated engine writes its logs (default: SPOOL/sim-logs)"
    )
    g.add_argument(
        "--sim-sources",
        default="all",
        help="which collectors read the simulator (default all); e.g. 'gpu' to watch real processes and logs",
    )
    g.add_argument(
        "--sim-nvml",
        action="store_true",
        help="read the simulated GPUs through the real NVML backend over a simulated NVML library",
    )
    g.add_argument(
        "--sim-nvml-fail",
        action="append",
        metavar="GPU:FUNCTION[:AFTER_S]",
        help="with --sim-nvml: make one NVML call on one GPU start failing, e.g. 2:nvmlDeviceGetPowerUsage:5",
    )
    p.set_defaults(func=cmd_agent)
