"""GPU probe (issue 29): the int8 batch-1 products with walking blocks (matvec.cu's PIPELINE 1) against one tile
per block (run 66's kernels), on the backbone decode step's own sequence of products at true size.

Every product reads a matrix of its own (16 layers' worth, 1.1 GB of int8), so the weights come from memory
as in the decode step, not from L2 as when one matrix is multiplied 20 times over (probe_int8_matvec.py).
Each chain runs once per replay of its graph (`graphs.per_call_us`, 10 replays). Variants:
* `walk`: the engine's int8 kernels as sources.py builds them (a few blocks per SM walk the tiles, the next
  tile's loads in flight while the current one is multiplied);
* `one_tile_per_block`: the same source with PIPELINE 0 and 4 blocks per SM (run 66's kernels);
* `walk_depth4`: walking with 4 loads per lane and buffer (more blocks per SM: 4);
* `bf16`: the engine's bf16 kernels on bf16 copies of the same matrices, for the bytes' pace.
Outputs of layer 0's products and of the text head are compared bit for bit with `one_tile_per_block`.

Run on the GPU machine: `python3 scripts/probe_matvec_walk.py` (writes $OUT/probe_matvec_walk.json).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from engine.model.quantized import Int8Matrix
from engine.realtime import graphs
from engine.realtime.kernels import Matvec, sources
from engine.realtime.kernels.runtime import nvrtc_compile, _load

LAYER_TYPES = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv",
               "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"]  # fmt: skip
HIDDEN, FFN, VOCAB = 2048, 8192, 65536
# (kind, rows, columns, of a norm, with a residual, gated)
Product = tuple[str, int, int, bool, bool, bool]


def products() -> list[Product]:
    chain: list[Product] = []
    for layer_type in LAYER_TYPES:
        if layer_type == "conv":
            chain.append(("in_proj 6144", 3 * HIDDEN, HIDDEN, True, False, False))
        else:
            chain.append(("qkv 3072", HIDDEN + 2 * 512, HIDDEN, True, False, False))
        chain.append(("out 2048", HIDDEN, HIDDEN, False, True, False))
        chain.append(("w1|w3 SwiGLU", 2 * FFN, HIDDEN, True, False, True))
        chain.append(("w2", HIDDEN, FFN, False, True, False))
    return chain


def built(depth: int, min_blocks: int, pipeline: int) -> tuple[object, object]:
    arch = "".join(map(str, torch.cuda.get_device_capability()))
    kernels = []
    for name in ("matvec_int8", "matvec_gated_int8"):
        kernel = sources.KERNELS[name]
        text = sources.defines({**kernel.defines, "MATVEC_DEPTH": depth, "MATVEC_MIN_BLOCKS": min_blocks, "PIPELINE": pipeline})
        kernels.append(_load(*nvrtc_compile(text + sources.read(kernel.file), name, arch)))
    return kernels[0], kernels[1]


@torch.inference_mode()
def main() -> None:
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(7)
    engine = Matvec.create(device, torch.bfloat16)
    assert engine is not None
    sms = engine.sm_count
    old_int8, old_gated = built(8, 4, 0)
    walk4, walk4_gated = built(4, 4, 1)
    variants: dict[str, Matvec] = {
        "one_tile_per_block": Matvec(engine.kernel, engine.gated_kernel, int8=old_int8, gated_int8=old_gated, sm_count=sms,
                                     walkers_per_sm={"bf16": 0, "int8": 0}),
        "walk": engine,
        "walk_depth4": Matvec(engine.kernel, engine.gated_kernel, 4, int8=walk4, gated_int8=walk4_gated, sm_count=sms,
                              walkers_per_sm={"bf16": 0, "int8": 4}),
    }
    chain = products()
    head: Product = ("text head", VOCAB, HIDDEN, True, False, False)

    def matrix(rows: int, columns: int) -> Int8Matrix:
        m = Int8Matrix.empty(rows, columns, device)
        m.values.copy_(torch.randint(-127, 128, (rows, columns), device=device, generator=generator, dtype=torch.int8))
        m.scales.copy_(torch.rand((rows,), device=device, generator=generator) * 1e-3 + 1e-4)
        return m

    weights = [matrix(rows, columns) for _, rows, columns, *_ in chain]
    head_weight = matrix(VOCAB, HIDDEN)
    inputs = {k: torch.randn((1, k), device=device, generator=generator).to(torch.bfloat16) for k in (HIDDEN, FFN)}
    norms = {k: (1 + 0.1 * torch.randn((k,), device=device, generator=generator)).to(torch.bfloat16) for k in (HIDDEN, FFN)}
    residual = torch.randn((2 * FFN,), device=device, generator=generator).to(torch.bfloat16)

    def call(matvec: Matvec, product: Product, weight: Int8Matrix | torch.Tensor) -> torch.Tensor:
        _, rows, columns, with_norm, with_residual, gated = product
        return matvec(inputs[columns], weight, residual[:rows] if with_residual else None, norms[columns] if with_norm else None,
                      1e-5, gated=gated)

    def chain_of(matvec: Matvec, kinds: set[str] | None, bf16: list[torch.Tensor] | None = None) -> Callable[[], object]:
        picked = [(p, (bf16 or weights)[i]) for i, p in enumerate(chain) if kinds is None or p[0] in kinds]

        def run() -> object:
            return [call(matvec, p, w) for p, w in picked]

        return run

    report: dict[str, object] = {"device": torch.cuda.get_device_name(device), "sms": sms, "chains_us": {}, "bitwise": {}}
    kinds = sorted({p[0] for p in chain})
    layer0 = [(p, weights[i]) for i, p in enumerate(chain[:4])] + [(chain[8], weights[8]), (head, head_weight)]
    reference = {p[0]: call(variants["one_tile_per_block"], p, w) for p, w in layer0}
    for name, matvec in variants.items():
        times: dict[str, float] = {"step (64 products)": graphs.per_call_us(device, chain_of(matvec, None), calls=1, replays=10)}
        for kind in kinds:
            times[kind] = graphs.per_call_us(device, chain_of(matvec, {kind}), calls=1, replays=10)
        times["text head"] = graphs.per_call_us(device, lambda m=matvec: call(m, head, head_weight), calls=1, replays=10)
        report["chains_us"][name] = times
        report["bitwise"][name] = {p[0]: bool(torch.equal(call(matvec, p, w), reference[p[0]])) for p, w in layer0}
        print(name, json.dumps({k: round(v, 1) for k, v in times.items()}), report["bitwise"][name], flush=True)
    bf16 = [w.dequantized() for w in weights]
    times = {"step (64 products)": graphs.per_call_us(device, chain_of(engine, None, bf16), calls=1, replays=10)}
    for kind in kinds:
        times[kind] = graphs.per_call_us(device, chain_of(engine, {kind}, bf16), calls=1, replays=10)
    report["chains_us"]["bf16"] = times
    print("bf16", json.dumps({k: round(v, 1) for k, v in times.items()}), flush=True)
    report["int8_bytes"] = {kind: sum(w.values.numel() for p, w in zip(chain, weights) if p[0] == kind) for kind in kinds}
    report["int8_bytes"]["step (64 products)"] = sum(w.values.numel() for w in weights)
    report["int8_bytes"]["text head"] = head_weight.values.numel()
    (Path(os.environ.get("OUT", ".")) / "probe_matvec_walk.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
