"""The log tailer on real files: partial lines, \\r bars, rotation, truncation, garbage, restarts, noise."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.collectors.logs import LogTailer
from agents.logparse import LogParser
from agents.wire import Event

T0 = 1_767_225_600.0  # the wall clock handed to poll(): only the fallback time and the idle timers use it


def line(i: int, rank: str = "TP0") -> str:
    return (
        f"[2026-01-01 00:{i // 60 % 60:02d}:{i % 60:02d} {rank}] Decode batch, #running-req: {i}, #token: 10, "
        "token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0\n"
    )


def ids(events: list[Event]) -> list[int]:
    return [int(e.fields["running_req"]) for e in events if e.kind == "decode_batch"]  # type: ignore[arg-type]


def append(path: Path, text: str | bytes) -> None:
    with path.open("ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def tailer(paths: list[Path | str], state: Path, **kw: object) -> LogTailer:
    return LogTailer([str(p) for p in paths], state, **kw)  # type: ignore[arg-type]


def test_only_complete_lines_are_read_and_a_partial_tail_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    full = line(1) + line(2)
    append(log, full + line(3)[:40])
    t = tailer([log], tmp_path / "state")
    assert ids(t.poll(T0)) == [1, 2]
    assert ids(t.poll(T0 + 1)) == []
    append(log, line(3)[40:] + line(4))
    assert ids(t.poll(T0 + 2)) == [3, 4]


def test_carriage_returns_split_tqdm_updates_as_they_arrive(tmp_path: Path) -> None:
    log = tmp_path / "sglang-TP0.log"
    append(
        log,
        "[2026-01-01 00:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB\n",
    )
    bar = "Capturing batches (bs={bs} avail_mem=3.02 GB):  {p}%|█▏  | {d}/34 [00:{d:02d}<00:38,  1.30s/it]"
    append(
        log,
        bar.format(bs=256, p=0, d=0)
        + "\r"
        + bar.format(bs=248, p=3, d=1)
        + "\r"
        + bar.format(bs=240, p=6, d=2),
    )
    t = tailer([log], tmp_path / "state")
    events = t.poll(T0)
    progress = [e for e in events if e.kind == "capture_progress"]
    # the last update has no terminator yet: it may still be being written
    assert [(e.fields["done"], e.fields["bs"]) for e in progress] == [(0, 256), (1, 248)]
    assert all(e.rank == "TP0" for e in events)  # untagged bar lines get the rank in the file name
    append(log, "\r" + bar.format(bs=232, p=9, d=3) + "\n")
    assert [e.fields["done"] for e in t.poll(T0 + 1) if e.kind == "capture_progress"] == [2, 3]


def test_rotation_finishes_the_old_file_then_reads_the_new_one_from_zero(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, line(1) + line(2))
    t = tailer([log], tmp_path / "state", orphan_grace_s=5.0)
    assert ids(t.poll(T0)) == [1, 2]
    with log.open("ab") as writer:  # the engine keeps writing to its open file descriptor
        log.rename(tmp_path / "sglang.log.1")
        writer.write(line(3).encode())
        writer.flush()
        append(log, line(10) + line(11))  # logrotate's new file
        got = ids(t.poll(T0 + 1))
        writer.write(line(4).encode())
    got += ids(t.poll(T0 + 2))
    got += ids(t.poll(T0 + 10))  # quiet past the grace period: the old file is closed
    assert got == [3, 10, 11, 4]  # the old file's line 4 was written after the new file's lines
    assert t.files == [str(log)]
    append(log, line(12))
    assert ids(t.poll(T0 + 11)) == [12]


def test_copytruncate_restarts_at_zero_even_when_the_file_regrew(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, line(1) + line(2) + line(3))
    t = tailer([log], tmp_path / "state")
    assert ids(t.poll(T0)) == [1, 2, 3]
    log.write_bytes(b"")
    append(log, line(20))
    assert ids(t.poll(T0 + 1)) == [20]
    # truncated and rewritten past the old offset between two polls: the changed first bytes give it away
    log.write_text(line(30) + line(31) + line(32) + line(33) + line(34))
    assert ids(t.poll(T0 + 2)) == [30, 31, 32, 33, 34]


def test_binary_garbage_and_invalid_utf8_do_not_stop_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(
        log, b"\x00\x01\xff\xfe garbage \xc3\x28 \x80\x80\n" + bytes(range(256)) + b"\n" + line(5).encode()
    )
    t = tailer([log], tmp_path / "state")
    events = t.poll(T0)
    assert ids(events) == [5]
    assert all("\x00" not in e.message for e in events)
    assert any("\ufffd" in e.message for e in events if e.kind == "raw")


def test_a_huge_line_is_cut_and_the_next_lines_still_parse(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, line(1) + "[2026-01-01 00:00:02 TP0] " + "x" * 3_000_000 + "\n" + line(3))
    t = tailer([log], tmp_path / "state", max_line_bytes=65_536)
    events = t.poll(T0)
    assert ids(events) == [1, 3]
    assert all(len(e.message) <= 8192 for e in events)
    assert len([e for e in events if e.kind == "raw"]) == 1


def test_restart_from_the_state_dir_yields_exactly_the_remaining_lines(tmp_path: Path) -> None:
    log, state = tmp_path / "sglang.log", tmp_path / "state"
    append(log, "".join(line(i) for i in range(1, 6)))
    t = tailer([log], state)
    assert ids(t.poll(T0)) == [1, 2, 3, 4, 5]
    t.commit()
    append(log, "".join(line(i) for i in range(6, 9)))
    assert ids(t.poll(T0 + 1)) == [6, 7, 8]  # handed over, but the agent died before spooling them
    t.close()
    append(log, line(9) + line(10)[:30])
    again = tailer([log], state)
    assert ids(again.poll(T0 + 2)) == [
        6,
        7,
        8,
        9,
    ]  # nothing unacknowledged is lost, nothing acknowledged repeats
    again.commit()
    again.close()
    append(log, line(10)[30:])
    third = tailer([log], state)
    assert ids(third.poll(T0 + 3)) == [10]


def test_a_commit_before_the_first_poll_keeps_the_saved_offsets(tmp_path: Path) -> None:
    log, state = tmp_path / "sglang.log", tmp_path / "state"
    append(log, line(1))
    t = tailer([log], state)
    t.poll(T0)
    t.commit()
    t.close()
    append(log, line(2))
    early = tailer([log], state)
    early.commit()  # e.g. the agent flushing an empty batch at start-up
    early.close()
    assert ids(tailer([log], state).poll(T0 + 1)) == [2]


def test_a_traceback_split_across_polls_and_a_restart_is_one_event(tmp_path: Path) -> None:
    log, state = tmp_path / "sglang.log", tmp_path / "state"
    append(
        log,
        line(1)
        + "[2026-01-01 00:00:02 TP3] Scheduler hit an exception: Traceback (most recent call last):\n",
    )
    append(log, '  File "scheduler.py", line 10, in run\n')
    t = tailer([log], state)
    first = t.poll(T0)
    assert [e.kind for e in first] == ["decode_batch", "scheduler_exception"]
    t.commit()  # the open traceback's first line is where a restart must resume
    t.close()
    append(log, "RuntimeError: NCCL error\n" + line(4))
    t2 = tailer([log], state)
    events = t2.poll(T0 + 1)
    tbs = [e for e in events if e.kind == "traceback"]
    assert len(tbs) == 1 and tbs[0].fields["exc_type"] == "RuntimeError" and tbs[0].rank == "TP3"
    assert 'File "scheduler.py"' in tbs[0].message
    assert ids(events) == [4]


def test_a_traceback_at_the_end_of_a_dead_process_log_is_flushed_when_quiet(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, line(1) + "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'x'\n")
    t = tailer([log], tmp_path / "state", idle_flush_s=2.0)
    assert [e.kind for e in t.poll(T0)] == ["decode_batch"]
    assert t.poll(T0 + 1) == []
    (tb,) = t.poll(T0 + 3)
    assert tb.kind == "traceback" and tb.fields["exc_type"] == "KeyError"


def test_globs_pick_up_files_that_appear_later_from_their_first_line(tmp_path: Path) -> None:
    (tmp_path / "sglang-TP0.log").write_text(line(1))
    t = tailer([tmp_path / "sglang-*.log"], tmp_path / "state")
    assert ids(t.poll(T0)) == [1]
    (tmp_path / "sglang-DP1_TP3.log").write_text(line(2, rank="DP1 TP3") + "untagged line\n")
    events = t.poll(T0 + 1)
    assert ids(events) == [2]
    assert [e.rank for e in events] == ["DP1 TP3", "DP1 TP3"]
    assert t.file_count == 2


def test_noise_is_rate_limited_per_file_and_the_drop_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    noise = "".join(f'INFO:     10.0.0.1:{i} - "POST /generate HTTP/1.1" 200 OK\n' for i in range(2000))
    append(log, line(1) + noise + line(2))
    t = tailer([log], tmp_path / "state")
    events = t.poll(T0)
    access = [e for e in events if e.kind == "http_access"]
    (report,) = [e for e in events if e.kind == "log_suppressed"]
    assert 100 <= len(access) <= 300
    assert report.fields["lines"] == 2000 - len(access)
    assert ids(events) == [1, 2]  # progress is never dropped
    later = "".join(f'INFO:     10.0.0.1:{i} - "POST /generate HTTP/1.1" 200 OK\n' for i in range(5))
    append(log, later)
    assert len([e for e in t.poll(T0 + 30) if e.kind == "http_access"]) == 5  # the allowance refills


def test_restart_after_rotation_while_the_agent_was_down(tmp_path: Path) -> None:
    log, state = tmp_path / "sglang.log", tmp_path / "state"
    append(log, line(1))
    t = tailer([log], state)
    assert ids(t.poll(T0)) == [1]
    t.commit()
    t.close()
    append(log, line(2))
    log.rename(tmp_path / "sglang.log.1")
    append(log, line(3))
    t2 = tailer([log], state, orphan_grace_s=1.0)
    got = ids(t2.poll(T0 + 1)) + ids(t2.poll(T0 + 5))
    assert got == [2, 3]


def test_a_huge_existing_log_is_read_from_its_recent_tail(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, "".join(line(i) for i in range(3000)))
    t = tailer([log], tmp_path / "state", backlog_bytes=20_000)
    got = ids(t.poll(T0))
    assert got and got[-1] == 2999 and len(got) < 200 and got == list(range(got[0], 3000))


def test_undated_lines_take_the_read_time_once_caught_up_but_not_in_a_backlog(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    append(log, line(1) + 'INFO:     10.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK\n')
    t = tailer([log], tmp_path / "state")
    backlog = t.poll(T0)
    assert [e.ts for e in backlog] == [backlog[0].ts] * 2  # history: the last dated line's time
    append(log, 'INFO:     10.0.0.1:2 - "POST /generate HTTP/1.1" 200 OK\n')
    (live,) = t.poll(T0 + 5)
    assert live.kind == "http_access" and live.ts == T0 + 5


def test_custom_parser_factory_and_source(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    append(log, "[2026-01-01 01:00:00] The server is fired up and ready to roll!\n")
    t = LogTailer([str(log)], tmp_path / "state", lambda p: LogParser(source=f"log:{p}", default_rank="TP7"))
    (ev,) = t.poll(T0)
    assert (ev.kind, ev.rank, ev.source) == ("server_ready", "TP7", f"log:{log}")


CONTENT = (
    line(1)
    + "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.0s/it]\r"
    + "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00,  1.0s/it]\n"
    + "[2026-01-01 00:00:03 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
    + '  File "scheduler.py", line 10, in run\n'
    + "RuntimeError: NCCL error\r\n"
    + "gpu1:1:2 [0] NCCL INFO Init COMPLETE ünïcødé\n"
    + line(4)
    + line(5)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(min_value=1, max_value=len(CONTENT.encode())), max_size=12))
def test_any_chunking_of_writes_gives_the_same_events_as_one_read(tmp_path: Path, cuts: list[int]) -> None:
    data = CONTENT.encode()
    d = tmp_path / f"c{abs(hash(tuple(cuts)))}"
    d.mkdir()
    log = d / "sglang.log"
    log.write_bytes(b"")
    t = tailer([log], d / "state")
    got: list[Event] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        append(log, data[prev:cut])
        prev = cut
        got += t.poll(T0)
    got += t.poll(T0 + 100)  # quiet: flushes nothing pending here, the traceback ended with the NCCL line
    expected = LogParser(source=f"log:{log}").feed  # same parser, whole lines
    want: list[Event] = []
    for text in CONTENT.replace("\r\n", "\n").replace("\r", "\n").splitlines():
        want += expected(text, T0)
    assert [(e.kind, e.fields, e.message) for e in got] == [(e.kind, e.fields, e.message) for e in want]


def test_a_fifo_or_directory_matching_the_glob_is_ignored_not_blocked_on(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "dir.log").mkdir()
    (tmp_path / "sglang.log").write_text(line(1))
    t = tailer([tmp_path / "*.log"], tmp_path / "state")
    assert ids(t.poll(T0)) == [1]  # returns at all: opening the FIFO would block forever
    assert t.files == [str(tmp_path / "sglang.log")]


def test_a_link_to_a_log_in_the_same_folder_is_still_followed(tmp_path: Path) -> None:
    # `current.log -> engine-0412.log`: a common way to name the live file; only links leaving the folder are
    # refused (tests/system/test_security_agent_logs.py)
    real = tmp_path / "engine-0412.log"
    append(real, line(1))
    (tmp_path / "current.log").symlink_to(real.name)
    t = tailer([tmp_path / "current.log"], tmp_path / "state")
    assert ids(t.poll(T0)) == [1]
    append(real, line(2))
    assert ids(t.poll(T0 + 1)) == [2]
