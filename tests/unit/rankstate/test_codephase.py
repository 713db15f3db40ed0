"""The phase a traceback was raised in, from the engines' and trainers' own code paths, on real frames."""

from __future__ import annotations

from pathlib import Path

from app.rankstate.codephase import phase_from_traceback, phase_of_code

CORPUS = Path(__file__).parents[2] / "corpus"


def _frames(stem: str) -> str:
    return "\n".join(line for line in (CORPUS / f"{stem}.log").read_text().splitlines() if 'File "' in line)


def test_a_backward_inside_a_training_script_is_a_training_step() -> None:
    # diffusers#12422: rank 3's accelerate backward raised after the all-reduce timed out
    assert phase_from_traceback(_frames("pytorch-diffusers-12422")) == "training"


def test_lmdeploys_engine_loop_is_serving() -> None:
    # lmdeploy#2471: the PyTorch engine's async_loop on an Ascend card
    assert phase_from_traceback(_frames("lmdeploy-lmdeploy-2471")) == "serving"


def test_vllm_v1s_engine_step_is_serving_whatever_it_calls() -> None:
    # vllm#43473: run_engine_core -> _process_engine_step -> execute_model -> flashinfer's __init__
    assert phase_from_traceback(_frames("vllm-vllm-43473")) == "serving"


def test_a_checkpoint_saved_by_a_training_script_is_the_checkpoint() -> None:
    # NVIDIA/tacotron2#129, verbatim frames
    tb = """Traceback (most recent call last):
  File "train.py", line 279, in <module>
    args.warm_start, args.n_gpus, args.rank, args.group_name, hparams)
  File "train.py", line 202, in train
    save_checkpoint(model, optimizer, learning_rate, iteration, checkpoint_path)
  File "train.py", line 119, in save_checkpoint
    'learning_rate': learning_rate}, filepath)
  File "/usr/local/lib/python3.6/dist-packages/torch/serialization.py", line 218, in save
    return _with_file_like(f, "wb", lambda f: _save(obj, f, pickle_module, pickle_protocol))
TypeError: file must have a 'write' attribute"""
    assert phase_from_traceback(tb) == "checkpoint"


def test_the_package_of_a_file_counts_and_a_step_names_its_phase() -> None:
    # vLLM's loaders live in model_executor/model_loader/ whatever the file is called
    assert phase_of_code("/x/vllm/model_executor/model_loader/default_loader.py", "get_all_weights") == (
        "loading_weights"
    )
    assert (
        phase_of_code("/x/vllm/v1/worker/gpu_worker.py", "init_worker_distributed_environment") == "dist_init"
    )
    assert (
        phase_of_code("/x/vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model") == "cuda_graph_capture"
    )
    assert phase_of_code("/x/megatron/training/initialize.py", "_initialize_distributed") == "dist_init"
    # the script's own main() says nothing
    assert phase_of_code("train.py", "main") is None
