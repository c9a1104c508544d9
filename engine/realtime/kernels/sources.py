"""What NVRTC compiles: every kernel's `.cu` file and its `#define`s, from the Python constants here.

The CUDA lives in this folder as `.cu` files (one per kernel family) and `common.cuh` (the shared device
helpers), shipped as package data beside this module. A kernel's NVRTC input is one string: its
`#define`s, generated here from the constants below (their one definition: the wrappers check a model
against the same names), then its `.cu` file with `#include "common.cuh"` replaced by that file's text.
`source(name)` is that string, exactly what NVRTC gets and what the disk cache is keyed by; no CUDA
headers and no include path are needed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

FOLDER = Path(__file__).resolve().parent  # the .cu files, next to this module (also in the PyInstaller bundle)

# The sampler's one block.
SAMPLER_THREADS = 1024
# The sampler over blocks, for long rows (the text logits): logits per block, the block's threads, the
# candidate slots per block (at least MAX_TOP_K, engine/protocol.py: room for ties at a slice's k-th
# key) and the candidates the last block gathers in shared memory (16 bytes each).
SAMPLER_GRID_SLICE = 4096
SAMPLER_GRID_THREADS = 512
SAMPLER_GRID_CANDIDATES = 128
SAMPLER_GRID_POOL = 2048

# The one-launch depthformer step's fixed limits.
DEPTH_WARPS = 16
DEPTH_THREADS = DEPTH_WARPS * 32
DEPTH_MAX_K = 4096  # the longest vector a phase stages (dim, ff)
DEPTH_MAX_QK_HEADS = 64
DEPTH_MAX_POSITIONS = 16  # codebooks
DEPTH_HEAD_DIM = 32  # one lane per element of a head
DEPTH_MAX_KV_WIDTH = 256  # kv_heads * head_dim: the keys and values of a position the attention stages
# The frame's `sync` words: the launch counter, the blocks that have read it, the probe's stamps (DEPTH_TIMING),
# then from DEPTH_ARRIVALS one barrier word per block.
DEPTH_ARRIVALS = 1024
# The per-codebook pointer table's fields (depthformer.cu's HEAD_*: head norm, its epsilon's float bits, logits
# table, its row scales, the code's embedding table, its row scales).
DEPTH_HEAD_FIELDS = 6
# The per-layer pointer table, in the order the kernel reads it.
# The last four are the matrices' row scales (int8 weights; for bf16 weights the kernel ignores them).
DEPTH_TABLE_FIELDS = (
    "norm", "qkv", "rope", "out", "ffn_norm", "w13", "w2", "qkv_rows", "qk_rows", "qkv_scales", "out_scales", "w13_scales", "w2_scales",
)

# The fused backbone attention's fixed shape.
ATTENTION_HEAD_DIM = 64
ATTENTION_CHUNK = 64  # keys per block
ATTENTION_THREADS = 128
ATTENTION_MAX_GROUP = 8
ATTENTION_PARTIAL = 2 + ATTENTION_HEAD_DIM  # floats per (split, head): the kernel's PARTIAL

# The batch-1 matrix-vector kernel's fixed shape.
MATVEC_WARPS = 8
# 16-byte chunks of its row a lane loads at once (2048 columns per warp), and the resident blocks per SM
# the registers are budgeted for (__launch_bounds__: 64 registers a thread). H200, one product of a
# graph of 20 (bench/results/run-44-gated-matvec/probe_matvec.json): 16 loads and 2 blocks (104
# registers) against these, normed 6144x2048 8.45 / 7.68 µs, 3072x2048 5.56 / 4.62, 2048x2048 3.33 /
# 3.24, 16384x2048 21.81 / 19.69 (cuBLAS 20.33), 2048x8192 8.20 / 7.63: more loads in flight per SM.
MATVEC_DEPTH = 8
MATVEC_MAX_K = 8192
MATVEC_MAX_SPLIT = MATVEC_WARPS  # row groups per row at most (a row's groups are in one block)
# Lanes per row group, by weight type (bf16: a warp; int8: half a warp, so a lane's loads cover as many
# weights, 256 per group and depth step, as with bf16), and the weights in one 16-byte load.
MATVEC_GROUP_LANES = {"bf16": 32, "int8": 16}
MATVEC_PER_CHUNK = {"bf16": 8, "int8": 16}
# Whether a block keeps the next tile's loads in flight while it multiplies (matvec.cu's PIPELINE: a few
# blocks per SM walk the tiles, two register buffers each), and the resident blocks per SM the registers are
# budgeted for (64 registers a thread at 4, 128 at 2: the second buffer needs them). bf16 keeps one tile per
# block: its products are timed against cuBLAS at start-up, and run 41's early trigger gained nothing there.
MATVEC_PIPELINE = {"bf16": 0, "int8": 1}
MATVEC_MIN_BLOCKS = {"bf16": 4, "int8": 2}

# The int8 prefill product on the tensor cores (prefill_product.cu): the columns of k staged per step, the
# steps in flight (cp.async; 3 of the 128-position kernel's 26 KB fit the 99 KB a block may take on RTX 30
# and 40 cards) and the position counts a block takes, one kernel each (a span picks the smallest that holds
# it; longer spans take blocks of the largest).
PF_ROWS = 128  # w's rows per block
PF_THREADS = 256  # 8 warps
PF_KC = 64
PF_STAGES = 3
PF_POSITIONS = (32, 64, 128)
# Each kernel's warps along w's rows (of its 8; the rest along the positions) and the resident blocks per SM its
# registers are budgeted for (__launch_bounds__). The 128-position kernel at 128 rows, the five backbone products'
# sum (H200, bench/results/run-78-prefill-layouts): 4 x 2 warps 112.5 µs with 1 block per SM (156 registers), 116.7
# with 2 (128), 8 x 1 114.3 / 120.3.
PF_WARPS_M = {32: 8, 64: 8, 128: 4}
PF_MIN_BLOCKS = {32: 2, 64: 2, 128: 1}

_SAMPLER_DEFINES = {
    "THREADS": SAMPLER_THREADS,
    "GRID_THREADS": SAMPLER_GRID_THREADS,
    "GRID_SLICE": SAMPLER_GRID_SLICE,
    "GRID_CANDIDATES": SAMPLER_GRID_CANDIDATES,
    "GRID_POOL": SAMPLER_GRID_POOL,
}
_DEPTHFORMER_DEFINES = {
    "DEPTH_WARPS": DEPTH_WARPS,
    "DEPTH_THREADS": DEPTH_THREADS,
    "DEPTH_MAX_K": DEPTH_MAX_K,
    "DEPTH_MAX_QK_HEADS": DEPTH_MAX_QK_HEADS,
    "DEPTH_MAX_POSITIONS": DEPTH_MAX_POSITIONS,
    "DEPTH_HEAD_DIM": DEPTH_HEAD_DIM,
    "DEPTH_MAX_KV_WIDTH": DEPTH_MAX_KV_WIDTH,
    "DEPTH_TABLE": len(DEPTH_TABLE_FIELDS),
    "DEPTH_ARRIVALS": DEPTH_ARRIVALS,
    "DEPTH_HEAD_FIELDS": DEPTH_HEAD_FIELDS,
}
_ATTENTION_DEFINES = {
    "HEAD_DIM": ATTENTION_HEAD_DIM,
    "CHUNK": ATTENTION_CHUNK,
    "THREADS": ATTENTION_THREADS,
    "MAX_GROUP": ATTENTION_MAX_GROUP,
}
_MATVEC_DEFINES = {
    "MATVEC_WARPS": MATVEC_WARPS,
    "MATVEC_DEPTH": MATVEC_DEPTH,
    "MATVEC_MAX_K": MATVEC_MAX_K,
}


@dataclass(frozen=True)
class Kernel:
    """One NVRTC kernel: its `extern "C"` name, the file that holds it, and the #defines it is built with."""

    name: str
    file: str
    defines: dict[str, int | str] = field(default_factory=dict)


# Every kernel the engine compiles with NVRTC (the jiterator's swiglu.cu is PyTorch's to compile: swiglu.py).
KERNELS: dict[str, Kernel] = {
    kernel.name: kernel
    for kernel in (
        Kernel("short_conv_step", "short_conv.cu"),
        Kernel("top_k_gumbel_argmax", "sampler.cu", _SAMPLER_DEFINES),
        Kernel("top_k_gumbel_argmax_grid", "sampler.cu", _SAMPLER_DEFINES),
        Kernel("depthformer_frame", "depthformer.cu", {**_DEPTHFORMER_DEFINES, "WEIGHT_INT8": 0, "DEPTH_NAME": "depthformer_frame"}),
        Kernel("depthformer_frame_int8", "depthformer.cu",
               {**_DEPTHFORMER_DEFINES, "WEIGHT_INT8": 1, "DEPTH_NAME": "depthformer_frame_int8"}),
        Kernel("backbone_attention", "backbone_attention.cu", _ATTENTION_DEFINES),
        *(
            Kernel(f"matvec{epilogue}{'_int8' * int8}", "matvec.cu", {
                **_MATVEC_DEFINES, "GATED": int(epilogue == "_gated"), "CONV": int(epilogue == "_conv"), "WEIGHT_INT8": int8,
                "MATVEC_NAME": f"matvec{epilogue}{'_int8' * int8}",
                **{name: table["int8" if int8 else "bf16"] for name, table in (
                    ("GROUP_LANES", MATVEC_GROUP_LANES), ("PER_CHUNK", MATVEC_PER_CHUNK), ("PIPELINE", MATVEC_PIPELINE),
                    ("MATVEC_MIN_BLOCKS", MATVEC_MIN_BLOCKS),
                )},
            })
            # The conv epilogue for int8 weights only: a tile of 8 bf16 rows holds 2 channels, 2 of its 8 warps idle.
            for int8, epilogue in ((0, ""), (0, "_gated"), (1, ""), (1, "_gated"), (1, "_conv"))
        ),
        Kernel("rms_norm_row", "rms_norm.cu"),
        Kernel("dequantize_int8", "dequantize.cu"),
        *(
            Kernel(f"prefill_int8_product_{positions}", "prefill_product.cu", {
                "PF_NAME": f"prefill_int8_product_{positions}", "PF_POSITIONS": positions, "PF_ROWS": PF_ROWS,
                "PF_THREADS": PF_THREADS, "PF_KC": PF_KC, "PF_STAGES": PF_STAGES,
                "PF_WARPS_M": PF_WARPS_M[positions], "PF_MIN_BLOCKS": PF_MIN_BLOCKS[positions],
            })
            for positions in PF_POSITIONS
        ),
        Kernel("prefill_int8_reduce", "prefill_product.cu", {"PF_REDUCE": 1}),
    )
}

_INCLUDE = re.compile(r'^#include "([\w.]+)"[ \t]*\n', re.MULTILINE)


def defines(values: dict[str, int | str]) -> str:
    """C #defines of a kernel's fixed limits, from the Python constants that are their one definition."""
    return "".join(f"#define {name} {value}\n" for name, value in values.items())


def read(file: str) -> str:
    """A file of this folder with each `#include "x.cuh"` line replaced by that file's text (once each)."""
    seen: set[str] = set()

    def expand(text: str) -> str:
        def include(match: re.Match[str]) -> str:
            header = match.group(1)
            if header in seen:
                return ""
            seen.add(header)
            return expand((FOLDER / header).read_text(encoding="utf-8"))

        return _INCLUDE.sub(include, text)

    return expand((FOLDER / file).read_text(encoding="utf-8"))


@functools.cache
def source(name: str) -> str:
    """The exact text NVRTC compiles for kernel `name`: its #defines, then its file with the header inlined."""
    kernel = KERNELS[name]
    return defines(kernel.defines) + read(kernel.file)


def files() -> list[Path]:
    """Every CUDA file this folder ships (the PyInstaller spec and its test collect these)."""
    return sorted([*FOLDER.glob("*.cu"), *FOLDER.glob("*.cuh")])
