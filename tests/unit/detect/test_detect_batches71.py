"""Batches 71 to 76's shapes, each from the real lines of the public thread named (tests/corpus keeps each excerpt):
a job saying it saves its state is in its checkpoint, as a loader saying what it loads is loading weights."""

from __future__ import annotations

from pathlib import Path

from agents import wire
from app.rankstate.reached import phase_shown
from tests.support.replaylines import lines_of, run_log


def raw(message: str) -> wire.Event:
    return wire.Event(ts=0.0, kind=wire.EventKind.RAW, severity="info", message=message)


def test_a_rank_killed_after_the_trainer_said_it_saves_crashed_in_its_checkpoint(tmp_path: Path) -> None:
    # https://github.com/hiyouga/LLaMA-Factory/issues/5255: "[INFO|trainer.py:3410] 2024-08-23 12:22:35,576 >>
    # Saving model checkpoint to saves/glm4_9b/lora/sft", then torchrun's SIGTERM and "failed (exitcode: -9)"
    incidents = run_log(tmp_path, lines_of("pytorch-llamafactory-5255"), 2024).incidents
    assert [(i.kind, i.phase) for i in incidents] == [("rank_crashed", "checkpoint")]


def test_the_save_lines_of_the_training_stacks_show_the_checkpoint_and_other_savings_do_not() -> None:
    saves = (
        "Saving model checkpoint to /root/autodl-tmp/save4/checkpoint-100",  # the HF Trainer (LLaMA-Factory#8939)
        "Saving the checkpoint (or staging if async is enabled).",  # torchtitan
        "Saving checkpoint. This may take some time. Retrieving full model state dict...",  # torchtune
        "Starting checkpoint save...",  # torchtune#1713
        "Waiting for checkpoint save request...",  # torchtitan's async save
        "saving step 4 model ...",
    )
    for line in saves:
        assert phase_shown(raw(line)) == "checkpoint", line
    # llama.cpp's prompt cache and a word in passing are no checkpoint
    others = (
        "prompt_save:  - saving prompt with length 231, total state size = 67.785 MiB",
        "saving tokenizer",
    )
    for line in others:
        assert phase_shown(raw(line)) is None, line
