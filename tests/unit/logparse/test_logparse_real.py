"""The parser on lines as real logs carry them: wrapped by collectors and launchers, in old and new header
shapes, with and without a year. Verbatim lines from public reports (source beside each) next to synthetic
ones built to the formats' documentation."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from agents.logparse import LogParser, parse_lines
from agents.wire import LOG_EVENT_KINDS
from tests.support.logparse_lines import SGLANG_LINES, TORCH_LINES, check, one, utc
from tests.support.logparse_real_lines import CORPUS_LINES, REAL_LINES
from tests.support.paths import CORPUS


def corpus_lines(stem: str, first: int = 1, last: int | None = None) -> list[str]:
    """Lines ``first``..``last`` (1-based, inclusive) of a corpus excerpt, verbatim."""
    return (CORPUS / f"{stem}.log").read_text(encoding="utf-8").splitlines()[first - 1 : last]


@pytest.mark.parametrize(("source", "line", "kind", "rank", "ts", "fields"), REAL_LINES + CORPUS_LINES)
def test_real_lines(
    source: str, line: str, kind: str, rank: str | None, ts: str | None, fields: dict[str, Any]
) -> None:
    events = parse_lines([line], year=2025)
    check(events[0], kind, rank, ts, **fields)
    assert events[0].ts > 0 or ts is None, source


def test_every_kind_the_parser_emits_is_in_the_wire_vocabulary() -> None:
    lines = (
        [x[1] for x in REAL_LINES + CORPUS_LINES] + [x[0] for x in SGLANG_LINES] + [x[0] for x in TORCH_LINES]
    )
    assert {e.kind for e in parse_lines(lines, year=2025)} <= LOG_EVENT_KINDS


SGL = "[2025-03-01 10:00:00 TP3] Load weight begin. avail mem=70.00 GB"


@pytest.mark.parametrize(
    "prefix",
    [
        "2025-03-01T09:59:59.123456789Z ",  # docker logs -t, kubectl logs --timestamps
        "2025-03-01T11:59:59.123456789+02:00 ",  # podman logs -t
        "2025-03-01T09:59:59.123456789Z stdout F ",  # a CRI log file (/var/log/containers)
        '2025-03-01T09:59:59Z {app="sglang", pod="sglang-0"} ',  # Loki's logcli
        "[2025-03-01T09:59:59Z] ",  # a collector's stamp in brackets
        "Mar 01 09:59:59 gpu-node-3 sglang[1234]: ",  # the systemd journal
        "sglang-1  | ",  # docker compose
        "   sglang-1  | ",  # ... copied with leading blanks
        "sglang-1  | 2025-03-01T09:59:59.5Z ",  # compose with --timestamps
        "[pod/sglang-0/sglang] ",  # kubectl logs --prefix
        "[sglang] | ",  # podman-compose
    ],
)
def test_collector_prefixes_in_front_of_the_engines_header(prefix: str) -> None:
    ev = one(prefix + SGL, year=2025)
    check(ev, "load_begin", "TP3", "2025-03-01 10:00:00", avail_mem_gb=70.0)  # the engine's own time wins


def test_a_collectors_stamp_dates_lines_without_a_time_and_its_zone_is_exact() -> None:
    p = LogParser()
    ev = p.feed("2025-03-01T12:00:00.500+02:00 Loading safetensors checkpoint shards:  50% Completed | 1/2")
    assert ev[0].kind == "shard_progress" and ev[0].ts == pytest.approx(utc("2025-03-01 10:00:00.500"))
    # a traceback with every line behind the stamp is still one traceback
    lines = [
        "2025-03-01T10:00:01Z Traceback (most recent call last):",
        '2025-03-01T10:00:01Z   File "/x/scheduler.py", line 1, in run',
        "2025-03-01T10:00:01Z RuntimeError: CUDA error: an illegal memory access was encountered",
        "2025-03-01T10:00:02Z [2025-03-01 10:00:02 TP0] Decode batch, #running-req: 1, #queue-req: 0",
    ]
    kinds = [e.kind for line in lines for e in p.feed(line)]
    # the exception is CUDA's own failure: the traceback, and the crash its message reports
    assert kinds == ["traceback", "child_crashed", "decode_batch"], kinds


def test_a_supervisors_python_logging_around_a_whole_traceback() -> None:
    # https://github.com/allenai/olmocr/issues/105 (lines 1-2 verbatim; the exception line completes it)
    events = parse_lines(
        [
            "2025-03-08 02:04:48,693 - __main__ - INFO - [2025-03-08 02:04:48 TP0] Scheduler hit an exception: "
            "Traceback (most recent call last):",
            '2025-03-08 02:04:48,693 - __main__ - INFO -   File "/home/xx/anaconda3/envs/olmocr/lib/python3.11/'
            'site-packages/sglang/srt/managers/scheduler.py", line 1773, in run_scheduler_process',
            "2025-03-08 02:04:48,694 - __main__ - INFO - torch.OutOfMemoryError: CUDA out of memory.",
        ]
    )
    # and CUDA's out-of-memory is the scheduler's end: the crash its exception reports
    assert [e.kind for e in events] == ["scheduler_exception", "traceback", "child_crashed"]
    check(events[1], "traceback", "TP0", "2025-03-08 02:04:48", exc_type="torch.OutOfMemoryError")


def test_a_traceback_logged_line_by_line_behind_vllms_header() -> None:
    # https://github.com/vllm-project/vllm/issues/6775 (the first four lines verbatim)
    w = "(RayWorkerWrapper pid=24271) ERROR 07-25 07:05:40 worker_base.py:382] "
    events = parse_lines(
        [
            w + "Traceback (most recent call last):",
            w + '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker_base.py", line 374, in '
            "execute_method",
            w + "    return executor(*args, **kwargs)",
            w
            + "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144]",
            "(RayWorkerWrapper pid=24271) INFO 07-25 07:05:41 worker_base.py:100] next",
        ],
        year=2025,
    )
    assert [e.kind for e in events] == ["traceback", "raw"], events
    check(events[0], "traceback", None, "2025-07-25 07:05:40", exc_type="RuntimeError")
    assert "return executor" in events[0].message


@pytest.mark.parametrize(
    "line",
    [
        "[36m(RayWorkerWrapper pid=123)[0m INFO 02-03 13:14:04 llm_engine.py:706] Memory profiling takes 3.2 s",
        "\ufffd[36m(RayWorkerWrapper pid=123, ip=10.3.32.122)\ufffd[0m INFO 02-03 13:14:04 [llm_engine.py:706] "
        "Memory profiling takes 3.2 s",
        "\x1b[36m(RayWorkerWrapper pid=123)\x1b[0m INFO 02-03 13:14:04 [llm_engine.py:706] Memory profiling takes 3.2 s",
    ],
)
def test_ray_wrappers_whose_colour_codes_lost_their_escape_byte(line: str) -> None:
    check(one(line, year=2025), "raw", None, "2025-02-03 13:14:04", pid=123, process="RayWorkerWrapper")


def test_vllm_worker_wrappers_name_their_rank_and_the_engine_core_does_not() -> None:
    check(one("(VllmWorker rank=3 pid=123) INFO 02-03 13:14:04 [gpu_worker.py:1] hi", year=2025),
          "raw", "rank3", "2025-02-03 13:14:04", global_rank=3)  # fmt: skip
    core = one("(EngineCore_0 pid=9) INFO 02-03 13:14:04 [core.py:1] hi", year=2025)
    check(core, "raw", None, "2025-02-03 13:14:04", process="EngineCore_0", pid=9)
    nested = one("(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=4385) (EngineCore_DP0 pid=6448) INFO 02-12 "
                 "15:00:36 [monitor.py:34] torch.compile takes 2222.52 s in total", year=2025)  # fmt: skip
    check(nested, "raw", None, "2025-02-12 15:00:36", pid=6448, process="EngineCore_DP0")


def test_rank_tags_without_a_time_and_torchruns_bare_glog_header() -> None:
    p = LogParser()
    p.feed("[2025-12-01 07:40:00 TP0] Init torch distributed begin.")
    check(
        p.feed("[TP3] Load weight begin. avail mem=70.00 GB")[0], "load_begin", "TP3", "2025-12-01 07:40:00"
    )
    run = p.feed("W1201 07:40:06.132000 28272 torch/distributed/run.py:874] Setting OMP_NUM_THREADS to 1")[0]
    check(run, "raw", None, "2025-12-01 07:40:06.132", pid=28272)
    assert run.severity == "warning"
    tb = p.feed('[rank3]:   File "/x.py", line 1')  # torchrun's per-line prefix: no header, no crash
    assert all(e.ts > 0 for e in tb)


def test_year_less_headers_take_the_year_from_the_log_never_1970() -> None:
    # after a dated line: its year, rolling over New Year
    events = parse_lines(
        ["[2025-12-31 23:59:00 TP0] Decode batch, #running-req: 1", "INFO 12-31 23:59:30 [x.py:1] a",
         "INFO 01-01 00:00:10 [x.py:1] b", "[rank0]:[E101 00:00:20.1 ProcessGroupNCCL.cpp:1] c"]
    )  # fmt: skip
    assert [e.ts for e in events[1:]] == [utc("2025-12-31 23:59:30"), utc("2026-01-01 00:00:10"),
                                           pytest.approx(utc("2026-01-01 00:00:20.1"))]  # fmt: skip
    # before any: the reference date (a file's mtime) is an upper bound, so December is last year's
    late = parse_lines(["INFO 12-31 23:59:30 [x.py:1] a", "INFO 01-02 08:00:00 [x.py:1] b"],
                       base_date=date(2026, 1, 3))  # fmt: skip
    assert [e.ts for e in late] == [utc("2025-12-31 23:59:30"), utc("2026-01-02 08:00:00")]
    # an explicit year is taken as it is
    assert one("INFO 12-31 23:59:30 [x.py:1] a", year=2024).ts == utc("2024-12-31 23:59:30")
    assert one("INFO 03-21 02:07:08 [x.py:1] a", year=2025).ts == utc("2025-03-21 02:07:08")
    assert one("Mar 21 02:07:08 node sglang[7]: hi", base_date=date(2025, 6, 1)).ts == utc(
        "2025-03-21 02:07:08"
    )


def test_a_slurm_task_label_is_taken_off_every_line_once_seen_traceback_frames_too() -> None:
    # https://github.com/sgl-project/sglang/issues/4096: "0: " in front of the header and of every frame
    events = parse_lines(corpus_lines("sglang-sglang-4096", 8), year=2025)
    assert [e.kind for e in events] == ["scheduler_exception", "traceback"]
    tb = events[1]
    check(tb, "traceback", "TP0", "2025-03-05 03:55:55", exc_type="torch.distributed.DistBackendError")
    assert "\n  File " in tb.message and "0:" not in tb.message  # the frames as Python printed them


def test_frames_without_their_traceback_line_or_indentation_make_one_traceback() -> None:
    # https://github.com/sgl-project/sglang/issues/8974: pasted with the indentation stripped, no header above
    (tb,) = parse_lines(corpus_lines("sglang-sglang-8974"), year=2025)
    check(tb, "traceback", None, None, exc_type="RuntimeError")
    assert tb.fields["exc_message"].startswith("RuntimeError: NCCL error: unhandled system error")
    assert "in init_torch_distributed" in tb.message
    # https://github.com/sgl-project/sglang/issues/25118: indented frames, no header; the exception's message is
    # SGLang's launcher reporting the dead scheduler, so that report comes with it
    tb, died = parse_lines(corpus_lines("sglang-sglang-25118"), year=2026)
    assert tb.kind == "traceback" and tb.fields["exc_type"] == "RuntimeError"
    check(died, "child_crashed", None, None, rank_index=0, exit_code=-3)
    assert died.message.startswith("Rank 0 scheduler died during initialization")
    # a frame line alone in a healthy log is no crash report of anything: it stays one traceback event
    assert [e.kind for e in parse_lines(['  File "/x/y.py", line 3, in f'], year=2025)] == ["traceback"]


def test_a_hard_wrapped_glog_line_is_joined_and_read_whole() -> None:
    # https://github.com/om-ai-lab/VLM-R1/issues/257: the terminal cut every line at 116 columns, mid-word
    events = [e for e in parse_lines(corpus_lines("pytorch-vlmr1-257"), year=2025) if e.kind != "raw"]
    assert [e.kind for e in events] == ["nccl_heartbeat", "nccl_dump"]
    check(events[0], "nccl_heartbeat", None, "2025-04-29 13:55:49.384372", stuck_s=480, global_rank=6)
    assert "ProcessGroupNCCL's watchdog got stuck for 480 seconds" in events[0].message
    # https://github.com/sgl-project/sglang/issues/3424: the paste broke "WorkNCCL(S" / "eqNum=1522789, ..."
    lines = corpus_lines("sglang-sglang-3424", 5, 7)
    timeouts = [e for e in parse_lines(lines, year=2025) if e.kind == "nccl_timeout"]
    assert [e.fields.get("seq") for e in timeouts] == [None, 1522789]
    assert timeouts[1].fields["op_type"] == "_ALLGATHER_BASE"
    # a long line that ends a sentence is not continued by the line after it
    line = lines[0][: lines[0].index("WorkNCCL(S")] + "done."
    assert [e.kind for e in parse_lines([line, "eqNum=1, x"], year=2025)] == ["nccl_timeout", "raw"]
    # a piece that adds nothing to what the line said is still read as the line it is (a worker's own print)
    after = parse_lines([lines[0], "step 12 loss 0.41"], year=2025, default_rank="rank2")
    assert [(e.kind, e.message) for e in after][1] == ("raw", "step 12 loss 0.41")


def test_a_worker_wrapper_without_a_rank_takes_the_rank_its_dist_init_line_names() -> None:
    # https://github.com/Project-HAMi/HAMi-core/issues/261: "(Worker pid=958)" names no rank until
    # "world_size=2 rank=1 ..." (vLLM's first dist-init line); pid 820 never says
    events = parse_lines(corpus_lines("vllm-hamicore-261", 2, 7), year=2026)
    by_pid = {(e.fields.get("pid"), e.rank) for e in events}
    assert (
        (958, "rank1") in by_pid and (820, None) in by_pid and (958, None) not in by_pid
    )  # the naming line itself
    check(events[0], "dist_init_begin", "rank1", "2026-08-09 20:55:03", global_rank=1, world_size=2)


def test_a_tqdm_bar_with_no_room_for_its_bar_is_still_a_bar_and_the_line_glued_after_it_is_read() -> None:
    # https://github.com/zai-org/ChatGLM2-6B/issues/520 (tqdm prints no bar where its width is unknown)
    from agents.logparse import LogParser

    line = (
        "Loading checkpoint shards:  57% 4/7 [00:40<00:29,  9.96s/it]ERROR:torch.distributed.elastic."
        "multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 31631) of binary: /usr/bin/python3\n"
    )
    parser = LogParser(base_date=None)
    bar, died = parser.feed(line) + parser.flush()
    assert (bar.kind, bar.fields["done"], bar.fields["total"]) == ("shard_progress", 4, 7)
    assert (died.kind, died.fields["exit_code"], died.fields["local_rank"]) == ("child_crashed", -9, 0)
    # a percentage in prose is no bar
    other = LogParser(base_date=None)
    evs = other.feed("INFO 11-18 18:07:21 worker.py:1] GPU usage at 57% 4/7 done\n") + other.flush()
    assert evs and all(e.kind not in ("shard_progress", "progress") for e in evs)


def test_a_nodes_label_in_front_of_a_traceback_is_peeled_from_every_line_the_node_writes() -> None:
    # https://github.com/Ascend/pytorch/issues/43: a multi-node runner's "worker-1: " before each line, the frames
    # of a barrier's traceback first, then "worker-1: RuntimeError: npuSynchronizeDevice:... error code is 107020"
    from agents.logparse import LogParser

    parser = LogParser(base_date=None)
    lines = (CORPUS / "pytorch-ascend-pytorch-43.log").read_text(encoding="utf-8").splitlines()[:12]
    events = [e for line in lines for e in parser.feed(line + "\n")] + parser.flush()
    (tb,) = [e for e in events if e.kind == "traceback"]
    assert tb.fields["exc_type"] == "RuntimeError" and "107020" in str(tb.fields["exc_message"])
    assert "worker-1:" not in tb.message and 'File "loader.py", line 163, in get_dataset' in tb.message
    # a word and a colon in prose is no node's label
    other = LogParser(base_date=None)
    (prose,) = other.feed("step1: File saved to /tmp/x\n") + other.flush()
    assert prose.message.startswith("step1: ")


def test_a_logfmt_record_is_read_by_its_time_level_and_message_and_gos_signal_words_are_a_death() -> None:
    # https://github.com/ollama/ollama/issues/9685: Go's slog, 'time=... level=ERROR source=sched.go:456 msg="error
    # loading llama server" error="llama runner process has terminated: signal: killed"'
    line = (
        'time=2025-03-12T12:14:22.015Z level=ERROR source=sched.go:456 msg="error loading llama server" '
        'error="llama runner process has terminated: signal: killed"\n'
    )
    parser = LogParser(base_date=None)
    (ev,) = parser.feed(line) + parser.flush()
    assert (ev.kind, ev.severity, ev.fields.get("signal")) == ("child_crashed", "critical", "SIGKILL")
    assert ev.ts == utc("2025-03-12T12:14:22.015")
    # a runner stopped by SIGTERM ("signal: terminated") was stopped, not killed; a record without a message is
    # no record
    stopped = LogParser(base_date=None)
    evs = stopped.feed(line.replace("signal: killed", "signal: terminated")) + stopped.flush()
    assert [e.kind for e in evs] == ["raw"] and evs[0].severity == "error"
    bare = LogParser(base_date=None)
    assert [e.kind for e in bare.feed("time=2025-03-12T12:14:22Z level=INFO\n") + bare.flush()] == ["raw"]


def test_an_exception_quoted_without_its_traceback_says_what_it_is_as_a_whole_traceback_would() -> None:
    # https://github.com/facebookresearch/metaseq/issues/52: the traceback's last two lines alone, "    raise
    # RuntimeError(" and "RuntimeError: Timed out initializing process group in store based barrier on rank: 4330,
    # for key: store_based_barrier_key:522 (world_size=2048, worker_count=1792, timeout=0:30:00)"
    lines = (CORPUS / "pytorch-metaseq-52.log").read_text(encoding="utf-8").splitlines()
    alone = [e for e in parse_lines(lines, year=2022) if e.kind != "raw"]
    whole = [e for e in parse_lines(["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', *lines], year=2022) if e.kind != "raw"]  # fmt: skip
    for evs in (alone, whole):
        (ev,) = evs
        assert (ev.kind, ev.fields["backend"], ev.fields["joined"], ev.fields["world_size"]) == (
            "collective_timeout", "c10d_store", 1792, 2048,
        )  # fmt: skip


def test_cs_what_behind_torchruns_rank_prefix_is_the_exceptions_message() -> None:
    # https://github.com/pytorch/torchtitan/issues/810: "[rank0]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 4]
    # Process group watchdog thread terminated with exception: [Rank 4] Watchdog caught collective operation timeout:
    # WorkNCCL(SeqNum=49120, OpType=_ALLGATHER_BASE, ...)"
    line = (CORPUS / "pytorch-torchtitan-810.log").read_text(encoding="utf-8").splitlines()[0]
    (ev,) = [e for e in parse_lines([line], year=2025)]
    assert (ev.kind, ev.rank, ev.fields["seq"], ev.fields["op_type"]) == (
        "nccl_timeout",
        "rank0",
        49120,
        "_ALLGATHER_BASE",
    )


def test_an_assertion_the_runtime_aborts_on_is_a_death_and_a_sentence_about_one_is_not() -> None:
    # https://github.com/ggml-org/llama.cpp/pull/18039: "> github/llama.cpp/src/llama-graph.cpp:956:
    # GGML_ASSERT(t_layer_inp[il] != nullptr && "layer input tensor is null") failed"; llama.cpp#6528's SYCL
    # backend: "UNREACHABLE executed at ./lib/SPIRV/SPIRVUtil.cpp:1887!"; C's own assert
    lines = [
        'github/llama.cpp/src/llama-graph.cpp:956: GGML_ASSERT(t_layer_inp[il] != nullptr && "layer input tensor is null") failed',
        "UNREACHABLE executed at ./lib/SPIRV/SPIRVUtil.cpp:1887!",
        "python3: csrc/x.c:12: run: Assertion `n > 0' failed.",
        "the assertion failed in my test, as I expected",
    ]
    kinds = [e.kind for e in parse_lines(lines, year=2025)]
    assert kinds == ["child_crashed", "child_crashed", "child_crashed", "raw"]


@pytest.mark.parametrize(
    ("stem", "line", "at"),
    [
        # https://github.com/huggingface/optimum-habana/pull/1504: the HF example scripts' Python logging format
        (
            "other-optimum-habana-1504",
            "11/25/2024 11:49:11 - INFO - __main__ - device: hpu",
            "2024-11-25T11:49:11",
        ),
        # https://github.com/hiyouga/LlamaFactory/issues/8939: LLaMA-Factory's own "[LEVEL|date] logger:line >>"
        (
            "pytorch-llamafactory-8939",
            "[INFO|2025-08-16 18:31:18] llamafactory.train.callbacks:143 >> ",
            "2025-08-16T18:31:18",
        ),
    ],
)
def test_the_training_stacks_own_python_logging_stamps_date_their_lines(
    stem: str, line: str, at: str
) -> None:
    lines = (CORPUS / f"{stem}.log").read_text(encoding="utf-8").splitlines()
    real = next(x for x in lines if x.startswith(line))
    (ev,) = parse_lines([real], year=2020)  # the line's own year wins over the stated default
    assert ev.ts == utc(at) and not ev.message.startswith(line[:8])


def test_the_level_word_behind_a_tools_stamp_is_the_lines_severity() -> None:
    # the level mmengine's and the HF example scripts' stamps carry (OpenMMLab's "06/27 08:41:09 - mmengine -
    # ERROR - ...", optimum-habana#1504's "11/25/2024 11:49:11 - INFO - __main__ - ..."): not guessed from words
    lines = [
        "06/27 08:41:09 - mmengine - ERROR - the batch sampler is empty",
        "11/25/2024 11:49:11 - WARNING - __main__ - device: hpu, n_hpu: 0, bf16: True",
        "11/25/2024 11:49:12 - INFO - __main__ - an error count of 0 in the last window",
    ]
    assert [e.severity for e in parse_lines(lines, year=2024)] == ["error", "warning", "info"]
