"""The parser's clock: the date of time-only and year-less lines, time zones, tqdm bars dated by their elapsed
time, undated lines, and never an incident dated 1970."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agents.logparse import LogParser, parse_lines
from tests.support.logparse_lines import check, one, utc


def test_time_only_prefix_takes_the_date_of_the_last_dated_line_and_rolls_over_midnight() -> None:
    events = parse_lines(
        [
            "[2024-03-01 23:59:50 TP0] Init torch distributed begin.",
            "[23:59:59 TP7] Load weight begin. avail mem=70.00 GB",
            "[00:00:05 TP7] Load weight end. type=LlamaForCausalLM, avail mem=50.00 GB, mem usage=20.00 GB.",
        ]
    )
    check(events[1], "load_begin", "TP7", "2024-03-01 23:59:59")
    check(events[2], "load_end", "TP7", "2024-03-02 00:00:05")


def test_time_only_prefix_without_any_date_uses_base_date() -> None:
    check(
        one("[23:17:01 TP7] Load weight begin. avail mem=1.00 GB", base_date=date(2024, 5, 6)),
        "load_begin",
        "TP7",
        "2024-05-06 23:17:01",
    )


def test_timezone_is_the_logs_and_milliseconds_count() -> None:
    ev = one("[2025-01-15 12:00:00.500 TP0] Memory pool end. avail mem=3.10 GB", tz=ZoneInfo("Europe/Berlin"))
    assert ev.ts == pytest.approx(utc("2025-01-15 11:00:00.500"))
    summer = one("[2025-07-15 12:00:00 TP0] Memory pool end. avail mem=3.10 GB", tz=ZoneInfo("Europe/Berlin"))
    assert summer.ts == pytest.approx(utc("2025-07-15 10:00:00"))


def test_tqdm_bars_split_on_carriage_return_and_dated_by_their_elapsed_time() -> None:
    p = LogParser()
    p.feed("[2025-06-26 09:47:18 TP0] Load weight begin. avail mem=137.20 GB")
    bar = (
        "Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]\r"
        "Loading safetensors checkpoint shards:  50% Completed | 32/64 [02:10<02:10,  4.02s/it]\r"
        "Loading safetensors checkpoint shards: 100% Completed | 64/64 [04:20<00:00,  4.02s/it]\n"
    )
    events = p.feed(bar)
    assert [e.kind for e in events] == ["shard_progress"] * 3
    assert [e.fields["done"] for e in events] == [0, 32, 64]
    assert {e.fields["total"] for e in events} == {64}
    assert events[1].ts == pytest.approx(utc("2025-06-26 09:49:28"))
    assert events[2].ts == pytest.approx(utc("2025-06-26 09:51:38"))
    # an undated NCCL line after the bar is placed at the bar's time, not back at load begin
    nccl = p.feed("node1:41820:41820 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>")
    assert nccl[0].ts == pytest.approx(utc("2025-06-26 09:51:38"))


def test_capture_bar_with_a_log_line_glued_after_it() -> None:
    p = LogParser()
    p.feed(
        "[2025-06-26 09:47:10 DP2 TP2] Capture draft cuda graph begin. This can take up to several minutes. avail mem=28.00 GB"
    )
    events = p.feed(
        "Capturing batches (bs=256 avail_mem=3.02 GB):  12%|█▏        | 4/34 [00:05<00:38,  1.30s/it]"
        "[2025-06-26 09:47:18 DP2 TP2] Capture draft cuda graph end. Time elapsed: 8.00 s. mem usage=0.50 GB. avail mem=27.50 GB."
    )
    assert [e.kind for e in events] == ["capture_progress", "capture_end"]
    check(
        events[0],
        "capture_progress",
        None,
        "2025-06-26 09:47:15",
        done=4,
        total=34,
        bs=256,
        avail_mem_gb=3.02,
        target="draft",
    )
    check(events[1], "capture_end", "DP2 TP2", "2025-06-26 09:47:18", target="draft", elapsed_s=8.0)
    assert "Capture draft" not in events[0].message


def test_glog_dates_take_the_year_of_the_log() -> None:
    events = parse_lines(
        [
            "[2025-02-07 01:00:00 TP6] Init torch distributed begin.",
            "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 6] Heartbeat monitor timed out!",
        ]
    )
    check(events[1], "nccl_heartbeat", None, None, global_rank=6)
    assert events[1].ts == pytest.approx(utc("2025-02-07 01:29:36.730311"))
    assert events[1].severity == "critical"


def test_undated_lines_take_the_last_timestamp_or_the_live_read_time() -> None:
    p = LogParser(source="log:/var/log/sglang.log")
    assert p.feed("gpu1:1:1 [0] NCCL INFO cudaDriverVersion 12040") == []  # waits for the log's first time
    ev, _ = p.feed("[2025-02-07 02:00:00 TP1] Load weight begin. avail mem=10.00 GB")
    assert ev.ts == pytest.approx(utc("2025-02-07 02:00:00")) and ev.source == "log:/var/log/sglang.log"
    (ev,) = p.feed("some unknown line")
    assert ev.ts == pytest.approx(utc("2025-02-07 02:00:00")) and ev.kind == "raw"
    # read live, five minutes after the last dated line: an unprefixed traceback happened now, not back then
    live = utc("2025-02-07 02:05:00")
    p.feed("Traceback (most recent call last):", now=live)
    p.feed('  File "x.py", line 1, in <module>', now=live)
    tb, crash = (
        p.feed("RuntimeError: CUDA error: an illegal memory access was encountered", now=live) + p.flush()
    )
    assert tb.kind == "traceback" and tb.ts == live
    assert (
        crash.kind == "child_crashed" and crash.ts == live
    )  # the CUDA context is lost: the process goes down
    # a read time behind the log's own clock (a skewed host) never moves events back in time
    (ev,) = p.feed("another unknown line", now=utc("2025-02-07 01:00:00"))
    assert ev.ts == pytest.approx(utc("2025-02-07 02:00:00"))


def test_lines_before_the_first_time_are_never_dated_1970() -> None:
    # https://github.com/sgl-project/sglang/issues/12076 (first two lines verbatim): a py-spy dump pasted first
    head = ['Thread 12816 (idle): "Thread-10 (watchdog_thread)"', "    select (selectors.py:415)"]
    events = parse_lines(
        [*head, "[2025-10-24 03:10:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300)"]
    )
    assert [e.ts for e in events] == [utc("2025-10-24 03:10:00")] * 3
    # a log with no time at all: dated by its reference when it is flushed, or left at 0 with none
    assert {e.ts for e in parse_lines(head, base_date=date(2025, 10, 24))} == {utc("2025-10-24 12:00:00")}
    assert {e.ts for e in parse_lines(head, year=2025)} == {utc("2025-01-01 12:00:00")}
    p = LogParser()
    assert p.feed(head[0]) == [] and p.pending and [e.ts for e in p.flush()] == [0.0] and not p.pending


def test_an_undated_traceback_read_live_takes_the_time_it_was_read_not_noon_of_the_logs_day() -> None:
    """vLLM's last words on a dead engine can be a bare traceback on stderr, with no time on any line; read as a
    backlog and flushed by the live agent, it was stamped 12:00 of the file's day (hours off the agent's clock,
    and the server refused the batch that carried why the engine died)."""
    from datetime import date

    from agents.logparse.parser import LogParser

    read_at = 1_796_184_000.0  # 2026-12-02 02:40 UTC: nowhere near noon
    p = LogParser(base_date=date(2026, 12, 2))
    lines = [
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 660, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    out = [e for line in lines for e in p.feed(line)]  # a backlog: no read time per line
    out += p.flush(now=read_at + 2)
    tb = [e for e in out if e.kind == "traceback"]
    assert len(tb) == 1 and "EngineDeadError" in str(tb[0].fields.get("exc_type"))
    assert read_at <= tb[0].ts <= read_at + 2, tb[0].ts - read_at


def test_replay_start_dates_a_file_with_no_time_and_keeps_its_order(tmp_path: Path) -> None:
    # issue 31: a pasted traceback has no time on any line; the user who knows when it happened says so
    from app.offline.replay import parse_files

    log = tmp_path / "paste.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        encoding="utf-8",
    )
    at = utc("2025-03-04 10:00:00")
    evs = [e for _, e in parse_files([log], start=at)]
    assert [e.kind for e in evs] == ["traceback", "child_crashed"]  # the paste's own order
    assert {e.ts for e in evs} == {at}
    # a file whose lines carry their own time is not moved by --start
    dated = tmp_path / "dated.log"
    dated.write_text("[2025-02-07 02:00:00 TP1] Load weight begin. avail mem=10.00 GB\n", encoding="utf-8")
    (ev,) = [e for _, e in parse_files([dated], start=at)]
    assert ev.ts == utc("2025-02-07 02:00:00")
