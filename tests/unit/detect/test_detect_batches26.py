"""Batches 26 to 30's shapes (speculation on vLLM, RL and training stacks, TGI and KTransformers, collectives),
each from the real lines of the public thread named (tests/corpus keeps each excerpt): a reporter's elided
frames, an engine timeout raised through the step loop, the RL step's worker calls, TGI's shards and its
launcher's stamps after a traceback, a loader naming the tensors it loads, torchrun's self-dated summary, a
communicator that could not be built."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.logparse_lines import utc
from tests.support.replaylines import lines_of, run_log


def test_an_rpc_timeout_through_the_step_loop_is_a_stall_while_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/40926: the reporter's "..." is an elision, not the exception
    tb, said = parse_lines(lines_of("vllm-vllm-40926"), year=2026)
    assert (tb.kind, tb.fields["exc_type"]) == ("engine_timeout", "TimeoutError")
    assert (said.kind, said.fields["call"]) == ("engine_timeout", "sample_tokens")  # what the exception says
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-40926"), 2026).incidents
    assert (inc.kind, inc.phase) == ("stalled_serving", "serving")


def test_a_crash_in_an_rl_steps_rollout_is_a_crash_in_training(tmp_path: Path) -> None:
    # https://github.com/PeterGriffinJin/Search-R1/issues/61: verl's generate_sequences -> torch.cuda.empty_cache
    (inc,) = run_log(tmp_path, lines_of("ray-searchr1-61"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")


def test_a_shard_that_failed_to_start_is_its_rank(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1354 and #866
    events = parse_lines(lines_of("tgi-tgi-1354"), year=2023)
    assert [e.kind for e in events][:2] == [
        "traceback",
        "child_crashed",
    ]  # the launcher's stamp ends the traceback
    (inc,) = run_log(tmp_path, lines_of("tgi-tgi-1354"), 2023).incidents
    assert (inc.culprit, inc.phase) == ("rank0", "loading_weights")
    (inc,) = run_log(tmp_path, lines_of("tgi-tgi-866"), 2023, name="866.log").incidents
    assert inc.culprit == "rank0"


def test_a_loader_naming_the_tensors_it_loads_places_the_crash_in_loading(tmp_path: Path) -> None:
    # https://github.com/kvcache-ai/ktransformers/issues/1803: "loading model.layers.43...weight to cuda:5", then
    # "Segmentation fault (core dumped)"
    (inc,) = run_log(tmp_path, lines_of("ktransformers-ktransformers-1803"), 2026).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "loading_weights")


def test_a_programs_own_tag_before_a_dated_header_is_its_process() -> None:
    # https://github.com/pytorch/torchtitan/pull/1287: "[rank0]:[titan] 2025-06-25 13:00:52,498 - root - INFO - step:"
    line = next(ln for ln in lines_of("pytorch-torchtitan-1287") if ln.startswith("[rank0]:[titan] "))
    (ev,) = parse_lines([line])
    assert (ev.rank, ev.fields["process"], ev.severity) == ("rank0", "titan", "info")
    assert ev.message.startswith("step: ") and ev.ts > 1.7e9  # dated by its own header


def test_torchruns_summary_entries_date_themselves_in_a_replay(tmp_path: Path) -> None:
    # https://github.com/vllm-project/speculators/issues/1115: an excerpt that starts inside the ChildFailedError;
    # the entries' own "time : 2026-09-07_13:02:58" dates them (and the traceback above), not the file's noon
    (inc,) = run_log(tmp_path, lines_of("pytorch-speculators-1115"), 2026).incidents
    assert inc.kind == "rank_crashed" and inc.culprit == "rank3"  # the first to go of the entries kept
    assert utc("2026-09-07 13:02:58") <= inc.opened_at <= utc("2026-09-07 13:03:30")


def test_a_communicator_that_could_not_be_built_places_the_crash_in_distributed_init(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/16707: pynccl_wrapper's ncclCommInitRank raised; and
    # https://github.com/vllm-project/vllm-ascend/issues/3162: HCCL's EI0009 'Transport init error' beside the
    # trainer's exception, whose own frames say nothing
    for stem in ("vllm-vllm-16707", "vllm-ascend-3162"):
        (inc,) = run_log(tmp_path, lines_of(stem), 2025, name=f"{stem}.log").incidents
        assert (inc.kind, inc.phase) == ("rank_crashed", "dist_init"), stem


def test_a_kernel_exception_on_an_npu_is_the_rank_going_down() -> None:
    # https://github.com/sgl-project/sglang/issues/12464: CANN's EZ9999 block, "... there is an exception of aivec
    # error ..." and "Kernel task happen error, retCode=0x31, [vector core exception]"
    events = parse_lines(lines_of("sglang-sglang-12464"), year=2025)
    assert any(e.kind == "child_crashed" and e.fields.get("cause") == "kernel_exception" for e in events)


def test_deepspeed_chats_hybrid_engine_generate_is_a_training_step(tmp_path: Path) -> None:
    # https://github.com/deepspeedai/DeepSpeed/issues/4945: the RLHF step's generation raised an illegal access
    (inc,) = run_log(tmp_path, lines_of("pytorch-deepspeed-4945"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")


def test_an_error_logged_by_a_request_handler_places_the_crash_in_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/15039: one line, "ERROR 03-19 10:55:18 [serving_chat.py:677]
    # vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running ... OutOfMemoryError(...)"
    (ev,) = parse_lines(lines_of("vllm-vllm-15039"), year=2025)
    assert (ev.kind, ev.fields["source_file"]) == ("engine_dead", "serving_chat.py:677")
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-15039"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")
