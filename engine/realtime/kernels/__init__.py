"""The engine's own CUDA kernels, compiled at start-up by PyTorch's NVRTC, one family per file pair.

Windows has no Triton, so `torch.compile` cannot fuse anything there; NVRTC ships inside PyTorch's
CUDA wheels on Windows and Linux alike, and needs no compiler on the user's PC. At batch 1 a kernel
costs its launch and latency more than its bytes, so each of these replaces a run of PyTorch kernels
(times: H200, in a CUDA graph). Each family is a `.cu` file (the CUDA) and a `.py` file of the same
name (its small wrapper: self-check, buffers, launch):
- `short_conv`: the LFM2 conv layer's decode step (b·u, shift the 3-tap state, depthwise conv, gate by c)
  as one kernel instead of five;
- `sampler`: top-k threshold + Gumbel-max choice + argmax over one row of logits as one block instead
  of ~7 kernels (`top_k.cuh`, which the depthformer frame's blocks run too) (PyTorch's top-k alone took ~14 µs per depthformer codebook); a row longer than 4096
  logits (the text's 65,536) over blocks of 4096 whose candidates the last block chooses among (16 µs
  against one block's 46 on the H200);
- `depthformer`: a whole depthformer frame (8 codebooks, each 6 layers, its logits head and the choice of
  its code: 8 x 43 kernels and 8 sampler kernels before) as one launch whose blocks hand each other each
  phase's vector as tagged words (a grid-wide barrier only between codebooks): a persistent kernel in the
  manner of Hazy Research's "no bubbles" megakernels, at the scale of one frame;
- `backbone_attention` (wrapper `attention.py`): one backbone attention layer's decode step (q|k norm,
  rotary, cache write and the attention over the positions so far, split over the keys) as one kernel
  instead of ~13, whose work follows the context's length instead of the cache's 4096 slots;
- `matvec`: a batch-1 matrix-vector product, optionally of its input's RMS norm and plus a residual
  row, with a whole row part's loads in flight per warp; `matvec_gated`, the same with the SwiGLU of
  the product's halves as its epilogue (w1|w3); `matvec_conv_int8`, the conv layers' int8 in-projection
  with the conv step (common.cuh's, short_conv's too) as its epilogue; the backbone decode step uses them
  for the products where they beat cuBLAS (and the norm and SwiGLU kernels) in a start-up timing (H200:
  all of them), the int8 ones always;
- `rms_norm`: the backbone decode step's RMS norms where no product takes the norm inside (the final
  norm, and those before a product that cuBLAS runs), one block each with one 16-byte load per thread
  (PyTorch's layer-norm kernel took ~3.9 µs per 2048-wide row);
- `swiglu`: silu(gate) * up as one kernel instead of two, through PyTorch's jiterator;
- `prefill_product`: a prefill span's product with an int8 matrix on the tensor cores (mma.sync, the int8
  rows turned into bf16 in registers), with no bf16 copy of the matrix, for the int8 engine's prefill (its
  decode steps read the int8 rows directly: `matvec`'s and `depthformer`'s int8 variants);
- `dequantize`: an int8 matrix with its row scales as bf16 in one vectorized kernel, for the int8 prefill
  where `prefill_product` does not run (before sm_80) and the eager paths.
`common.cuh` holds the device helpers they share; `sources.py` the #defines (from the Python constants
that are their one definition) and each kernel's exact NVRTC input; `runtime.py` the compiling (in
background threads while the weights load), the on-disk cache of compiled kernels, and the launch
binding. On Hopper and later the backbone decode step's kernels (short_conv, backbone_attention, matvec,
matvec_gated, rms_norm) are programmatic dependent launches (`launch_after_previous`): each may start as
the blocks of the kernel ahead of it exit, and waits inside only where it touches what came before. The
int8 products walk their tiles with one wave of blocks and let the next kernel launch right after their
own wait (common.cuh), so its blocks start as theirs leave each SM (H200 run 71: int8 step 0.613 → 0.546 ms).
Every kernel computes the same function as the plain ops it replaces (the GPU tests compare them on
random data, and each is checked once at start-up). When NVRTC is missing or a check fails, the plain
ops run instead: slower, same results within bf16 rounding.
"""

from engine.realtime.kernels.attention import BackboneAttention
from engine.realtime.kernels.depthformer import DepthformerFrame
from engine.realtime.kernels.dequantize import Dequantize
from engine.realtime.kernels.matvec import Matvec
from engine.realtime.kernels.prefill_product import PrefillInt8Product
from engine.realtime.kernels.rms_norm import RmsNormRow
from engine.realtime.kernels.runtime import compile_in_background, compile_status, float_bits, launch_after_previous
from engine.realtime.kernels.sampler import TopKGumbelArgmax
from engine.realtime.kernels.short_conv import ShortConvStep, short_conv_step_reference
from engine.realtime.kernels.sources import DEPTH_TABLE_FIELDS
from engine.realtime.kernels.swiglu import _jit_swiglu, swiglu


def kernel_status() -> dict[str, str]:
    """Per fused kernel: "ready", or why it is not (compiling the kernels if needed). For diagnostics."""
    status = compile_status()
    status["swiglu"] = "ready" if _jit_swiglu() is not None else "unavailable (see the log)"
    return status


__all__ = [
    "DEPTH_TABLE_FIELDS",
    "BackboneAttention",
    "DepthformerFrame",
    "Dequantize",
    "Matvec",
    "PrefillInt8Product",
    "RmsNormRow",
    "ShortConvStep",
    "TopKGumbelArgmax",
    "compile_in_background",
    "float_bits",
    "kernel_status",
    "launch_after_previous",
    "short_conv_step_reference",
    "swiglu",
]
