"""Which ranks exist, how SGLang labels them, and where they sit (host, GPU)."""

from __future__ import annotations

from dataclasses import dataclass

from agents.sim.spec import ClusterSpec


@dataclass(frozen=True, slots=True)
class RankInfo:
    label: str  # as the engine prints it: "TP3", "DP1 TP5"
    index: int  # position in the launch, 0-based (also the launcher's scheduler_N)
    nccl_rank: int  # rank in its torch process group, as PyTorch's "[rankN]" glog prefix shows it
    host: str
    node_rank: int
    gpu_index: int
    tp_rank: int
    dp_rank: int | None
    stats: bool  # logs decode/prefill stats and exports scheduler metrics (attention-TP rank 0)
    pp_rank: int = 0

    @property
    def title(self) -> str:
        """The process title SGLang sets with setproctitle."""
        return "sglang::scheduler_" + self.label.replace(" ", "_")

    @property
    def file_stem(self) -> str:
        return self.label.replace(" ", "-")


def ranks(cluster: ClusterSpec) -> list[RankInfo]:
    """Every scheduler in launch order. Tags appear only for dimensions > 1, in SGLang's order: DP, PP, TP, EP
    (``DP1 TP5``, ``PP1 TP0``, ``TP3 EP3``); the last pipeline stage's attention-TP rank 0 logs the stats."""
    out: list[RankInfo] = []
    replicas = 1 if cluster.dp_attention else cluster.dp
    attn_tp = cluster.tp // cluster.dp if cluster.dp_attention else cluster.tp
    for replica in range(replicas):
        for p in range(cluster.pp):
            for t in range(cluster.tp):
                i = len(out)
                dp_rank = (t // attn_tp if cluster.dp_attention else replica) if cluster.dp > 1 else None
                tags = [f"DP{dp_rank}"] if dp_rank is not None else []
                tags += [f"PP{p}"] if cluster.pp > 1 else []
                tags += [f"TP{t}"] + ([f"EP{t}"] if cluster.ep else [])
                node = i // cluster.gpus_per_host
                out.append(
                    RankInfo(
                        label=" ".join(tags),
                        index=i,
                        nccl_rank=p * cluster.tp + t,
                        host=cluster.hosts[node],
                        node_rank=node,
                        gpu_index=i % cluster.gpus_per_host,
                        tp_rank=t,
                        dp_rank=dp_rank,
                        stats=t % attn_tp == 0 and p == cluster.pp - 1,
                        pp_rank=p,
                    )
                )
    return out


def rank_labels(cluster: ClusterSpec) -> list[str]:
    return [r.label for r in ranks(cluster)]
