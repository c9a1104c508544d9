"""How fast is each backbone decode product with the matrix-vector kernel's register budget changed, and
with the SwiGLU as its epilogue (H200 probe)?

Per variant of the kernel (MATVEC_DEPTH 16-byte loads per lane, registers budgeted for
MATVEC_MIN_BLOCKS resident blocks per SM; the shipped one first) and per decode product at true size
(random weights of the real shapes), the time of one product in a CUDA graph of 20 back to back, as the
start-up timing measures it, beside cuBLAS (after the norm kernel where the product is of a norm, and
before the SwiGLU kernel where it is gated). Each variant's outputs are checked against the shipped
kernel's (bitwise where the sums are the same, else within bf16 rounding). Writes
$OUT/probe_matvec.json. Run on the GPU machine: `PYTHONPATH=$PWD python3 bench/probes/probe_matvec.py`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import torch

from engine.realtime import graphs
from engine.realtime.kernels import Matvec, RmsNormRow, sources, swiglu
from engine.realtime.kernels.sources import MATVEC_DEPTH, MATVEC_MIN_BLOCKS
from engine.realtime.static_model import product_label

# (depth, min blocks), the shipped one first. Run 44 shipped 16 and 2 (104 registers), and chose 8 and 4 from it.
VARIANTS = list(dict.fromkeys([(MATVEC_DEPTH, MATVEC_MIN_BLOCKS["bf16"]), (16, 2), (8, 2), (8, 3), (8, 4), (4, 4)]))
# (rows, columns, with a residual, of a norm, gated): the decode step's products (LFM2.5-Audio-1.5B)
SHAPES = [(6144, 2048, False, True, False), (3072, 2048, False, True, False), (2048, 2048, True, False, False),
          (16384, 2048, False, True, False), (16384, 2048, False, True, True), (2048, 8192, True, False, False)]  # fmt: skip


def variant(depth: int, blocks: int) -> Matvec:
    kernels = []
    for name in ("matvec", "matvec_gated"):
        defines = {**sources.KERNELS[name].defines, "MATVEC_DEPTH": depth, "MATVEC_MIN_BLOCKS": blocks}
        source = sources.defines(defines) + sources.read(sources.KERNELS[name].file)
        kernels.append(torch.cuda._compile_kernel(source, name))
    return Matvec(*kernels, depth=depth)


@torch.inference_mode()
def main() -> None:
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device=device).manual_seed(5)
    norm_row = RmsNormRow.create(2048, device, torch.bfloat16)
    assert norm_row is not None
    matvecs = {f"depth {d}, {b} blocks/SM": variant(d, b) for d, b in VARIANTS}
    results: dict[str, object] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device), "products": {}}
    for rows, columns, with_residual, with_norm, gated in SHAPES:
        weight = (torch.randn((rows, columns), device=device, generator=generator) / columns**0.5).to(torch.bfloat16)
        x = torch.randn((1, columns), device=device, generator=generator).to(torch.bfloat16)
        norm = torch.randn((columns,), device=device, generator=generator).to(torch.bfloat16) if with_norm else None
        residual = torch.randn((rows,), device=device, generator=generator).to(torch.bfloat16) if with_residual else None

        def cublas() -> torch.Tensor:
            h = norm_row(x, norm, 1e-5) if norm is not None else x
            out = torch.addmm(residual, h, weight.t()) if residual is not None else torch.mm(h, weight.t())
            return swiglu(*out.chunk(2, dim=-1)) if gated else out

        label = product_label((rows, columns, with_residual, with_norm, gated))
        entry: dict[str, object] = {"cublas_us": graphs.per_call_us(device, cublas, replays=10)}
        reference = None
        for name, matvec in matvecs.items():
            if not matvec.supports(columns, gated=gated):
                entry[name] = "unsupported"
                continue
            product = functools.partial(matvec, x, weight, residual, norm, 1e-5, gated=gated)
            got = product()
            if reference is None:
                reference = got
            same_sums = Matvec.split(columns, matvec.depth) == Matvec.split(columns)
            error = float((got.double() - reference.double()).norm() / reference.double().norm())
            entry[name] = {
                "us": graphs.per_call_us(device, product, replays=10),
                "bitwise_equal_to_shipped": bool(torch.equal(got, reference)),
                "same_sums_as_shipped": same_sums,
                "relative_error_to_shipped": error,
                "error_to_cublas": float((got.double() - cublas().double()).norm() / cublas().double().norm()),
            }
        results["products"][label] = entry
        print(label, json.dumps(entry), flush=True)
    (Path(os.environ.get("OUT", ".")) / "probe_matvec.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
