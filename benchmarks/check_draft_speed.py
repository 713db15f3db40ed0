"""How long `specwatch check-draft` takes on a 1 TB MoE target, against reading the bytes it avoids.

Builds a Kimi-K2.5-shaped target (61 layers, 384 experts, FP8 experts, 64 shards, ~1 TB) as sparse
safetensors files, plus a 7168-wide EAGLE-3 draft, then times:
  - preflight: load_checkpoint(draft) + load_checkpoint(target) + check_draft (headers only), best of 3;
  - baseline: reading 1 GiB of tensor data from a real (non-sparse) file in the same directory, scaled to
    the checkpoint's total size: the least any check that opens the weights would pay.
Usage: python benchmarks/check_draft_speed.py [--dir DIR] [--experts N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.preflight import check_draft, load_checkpoint
from tests.support.checkpoints import KIMI, make_draft, make_target


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--experts", type=int, default=384)
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="specwatch-bench-"))
    t0 = time.perf_counter()
    target = make_target(
        root / "target", hidden=7168, layers=61, vocab=163840, shards=64, experts=args.experts, inter=2048,
        arch="DeepseekV3ForCausalLM",
    )  # fmt: skip
    draft = make_draft(root / "draft", dims=KIMI, sparse=True, layout="layers")
    build_s = time.perf_counter() - t0

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        d = load_checkpoint(draft, "draft")
        t = load_checkpoint(target, "target")
        findings = check_draft(d, t, "sglang", "0.5.6")
        best = min(best, time.perf_counter() - t0)
    total = t.total_bytes + d.total_bytes

    blob = root / "baseline.bin"
    chunk = os.urandom(1 << 20)
    with blob.open("wb") as f:
        for _ in range(1024):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    t0 = time.perf_counter()
    with blob.open("rb", buffering=0) as f:
        while f.read(16 << 20):
            pass
    gib_s = time.perf_counter() - t0
    blob.unlink()
    read_all_s = gib_s * total / (1 << 30)

    print(
        f"target: {len(t.tensors)} tensors in {len(t.files)} shards, {total / 1e12:.2f} TB (sparse); built in {build_s:.1f} s"
    )
    print(f"preflight (draft + target headers + checks), best of 3: {best:.3f} s, {len(findings)} findings")
    print(
        f"baseline: read 1 GiB (page cache) in {gib_s:.3f} s -> {read_all_s:.0f} s for the whole checkpoint"
    )
    print(f"ratio: preflight is {read_all_s / best:,.0f}x faster than reading the weights once")


if __name__ == "__main__":
    main()
