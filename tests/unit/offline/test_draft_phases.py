"""The draft model's own start-up steps are named as the draft's: a speculative engine loads the target, then
the draft (SGLang: after the target's graphs, with the same "Load weight begin"; vLLM: "Loading drafter
model..." right after the target's weights), and captures the draft's graphs. Through the real parser and rank
state, on vLLM 0.32's own log and on the simulator's SGLang and vLLM launches."""

from __future__ import annotations

from app.offline.evaluate import play_scenario
from app.offline.replay import replay
from app.rankstate.phaselabels import phase_label
from tests.support.paths import FIXTURES

LOGS = FIXTURES / "vllm032"


def _labels(run: object, rank: str = "TP0") -> list[str]:
    r = run.launch.ranks[rank]  # type: ignore[attr-defined]
    return [phase_label(p.phase, p.subject) for p in r.phases]


def test_vllm_032s_drafter_load_is_the_drafts() -> None:
    run, _ = replay([LOGS / "eagle3-rejected-then-sigterm.log"], tick_s=1.0)
    labels = _labels(run)
    assert labels.count("loading weights") == 1 and labels.count("loading draft weights") == 1, labels
    assert labels.index("loading weights") < labels.index("loading draft weights")


def test_sglang_draft_load_and_graphs_are_the_drafts_in_the_simulator() -> None:
    labels = _labels(play_scenario("healthy"))
    assert labels.count("loading weights") == 1, labels  # the target's, once
    assert labels.count("loading draft weights") == 1
    assert "allocating the draft's KV cache" in labels and labels.count("capturing draft graphs") == 2
    assert labels.index("cuda graph capture") < labels.index("loading draft weights")  # the target's first
    assert labels[-1] == "serving"


def test_vllm_drafter_in_the_simulator_loads_after_the_target_as_the_real_one_does() -> None:
    labels = _labels(play_scenario("vllm-healthy"))
    assert labels.count("loading weights") == 1 and labels.count("loading draft weights") == 1, labels
    assert labels.index("loading weights") < labels.index("loading draft weights") < labels.index("warmup")
