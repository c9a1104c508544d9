"""GPU probe (issue 29): the int8 batch-1 product, dequantized in registers against llama.cpp's way (the
activation row quantized to int8 per block of 32, dp4a), on the backbone's shapes.

Run on the GPU machine: `python3 scripts/probe_int8_matvec.py OUT.json`. Variants, each timed as the engine
times products (`graphs.per_call_us`: 20 calls back to back in one graph) with its error against the float64
product of the dequantized weights and the bf16 row:
* `engine`: the engine's `matvec_int8` (a half-warp per row, 8 loads of 16 weights per lane);
* `rows{R}_depth{D}`: the same dequantization, but each half-warp takes R rows at once, so that the row's
  staged floats are read from shared memory once for R rows (the engine's reads 4 bytes of shared memory per
  weight byte, where the bf16 product reads 1); D loads per lane and row;
* `dp4a`: W8A8, llama.cpp's mmvq: each block quantizes the row per 32 values (amax / 127) into shared memory,
  then 4 dp4a per 16 weights and one multiply by the block's scale;
* `dp4a_prequantized`: the same with the row quantized beforehand (as llama.cpp's separate quantize_q8_1
  kernel, shared by the products of one row), the quantization's own kernel not counted;
* `bf16_engine` and `cublas_bf16`: the bf16 products on the same shapes, for the bytes' pace.
"""

from __future__ import annotations

import json
import sys

import torch

from engine.model.quantized import Int8Matrix, quantize_rows
from engine.realtime import graphs
from engine.realtime.kernels.matvec import Matvec
from engine.realtime.kernels.runtime import _load, launch_after_previous, nvrtc_compile
from engine.realtime.kernels.sources import read

SHAPES = [(3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192), (6144, 2048)]
THREADS, GROUP_LANES, MAX_K = 256, 16, 8192

KERNELS = r"""
#include "common.cuh"
#define GROUPS (THREADS / GROUP_LANES)

__device__ __forceinline__ int plane(int j, int c, int K) { return j * (K / 16) + c; }
__device__ __forceinline__ float dequant(unsigned int u, int i) {
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540 + i)) - 8388736.0f;
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) rows_product(
        const signed char* __restrict__ W, const float* __restrict__ scales, const unsigned short* __restrict__ x,
        unsigned short* __restrict__ out, int N, int K, int split) {
    __shared__ float4 xf[MAX_K / 4];
    __shared__ float partial[GROUPS * ROWS];
    const int glane = threadIdx.x % GROUP_LANES, group = threadIdx.x / GROUP_LANES;
    const int local = group / split, part = group % split;
    const int base = (blockIdx.x * (GROUPS / split) + local) * ROWS;
    const int per_lane = K / (GROUP_LANES * 16 * split), first = part * (K / 16 / split);
    uint4 w[ROWS][DEPTH];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const uint4* p = reinterpret_cast<const uint4*>(W + (long long)min(base + r, N - 1) * K) + first + glane;
        #pragma unroll
        for (int t = 0; t < DEPTH; ++t)
            if (t < per_lane) w[r][t] = __ldcs(p + GROUP_LANES * t);
    }
    wait_for_previous();
    for (int c = threadIdx.x; c < K / 8; c += THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[c];
        const unsigned int words[4] = {v.x, v.y, v.z, v.w};
        float f[8];
        #pragma unroll
        for (int j = 0; j < 4; ++j) { f[2 * j] = __uint_as_float(words[j] << 16); f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u); }
        xf[plane(2 * (c & 1), c >> 1, K)] = make_float4(f[0], f[1], f[2], f[3]);
        xf[plane(2 * (c & 1) + 1, c >> 1, K)] = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();
    float acc[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
    #pragma unroll
    for (int t = 0; t < DEPTH; ++t) {
        if (t < per_lane) {
            const int c = first + glane + GROUP_LANES * t;
            float4 h[4];
            #pragma unroll
            for (int j = 0; j < 4; ++j) h[j] = xf[plane(j, c, K)];
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const unsigned int words[4] = {w[r][t].x ^ 0x80808080u, w[r][t].y ^ 0x80808080u, w[r][t].z ^ 0x80808080u, w[r][t].w ^ 0x80808080u};
                float sum = 0.0f;
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    sum += dequant(words[j], 0) * h[j].x + dequant(words[j], 1) * h[j].y + dequant(words[j], 2) * h[j].z + dequant(words[j], 3) * h[j].w;
                acc[r] += sum;
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        for (int offset = GROUP_LANES / 2; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
        if (glane == 0) partial[group * ROWS + r] = acc[r];
    }
    __syncthreads();
    if (part == 0 && glane == 0) {
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int row = base + r;
            if (row < N) {
                float total = 0.0f;
                for (int p = 0; p < split; ++p) total += partial[(group + p) * ROWS + r];
                out[row] = float_to_bf16(total * scales[row]);
            }
        }
    }
}

// x (K bf16) -> xq (K int8, per 32 values amax/127) and xd (K/32 float scales): one warp per block of 32.
__device__ __forceinline__ void quantize_block(const unsigned short* x, signed char* xq, float* xd, int b, int lane) {
    const float v = bf16_to_float(x[b * 32 + lane]);
    float amax = fabsf(v);
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float d = amax / 127.0f;
    xq[b * 32 + lane] = (signed char)(d > 0.0f ? __float2int_rn(v / d) : 0);
    if (lane == 0) xd[b] = d;
}

extern "C" __global__ void quantize_row(const unsigned short* __restrict__ x, signed char* __restrict__ xq, float* __restrict__ xd, int K) {
    const int lane = threadIdx.x & 31, warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    wait_for_previous();
    if (warp < K / 32) quantize_block(x, xq, xd, warp, lane);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) dp4a_product(
        const signed char* __restrict__ W, const float* __restrict__ scales, const unsigned short* __restrict__ x,
        const signed char* __restrict__ xq_global, const float* __restrict__ xd_global, int prequantized,
        unsigned short* __restrict__ out, int N, int K, int split) {
    __shared__ int4 xq[MAX_K / 16];
    __shared__ float xd[MAX_K / 32];
    __shared__ float partial[GROUPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int glane = threadIdx.x % GROUP_LANES, group = threadIdx.x / GROUP_LANES;
    const int row = blockIdx.x * (GROUPS / split) + group / split, part = group % split;
    const int per_lane = K / (GROUP_LANES * 16 * split), first = part * (K / 16 / split);
    const uint4* weights = reinterpret_cast<const uint4*>(W + (long long)min(row, N - 1) * K) + first + glane;
    uint4 w[DEPTH];
    #pragma unroll
    for (int t = 0; t < DEPTH; ++t)
        if (t < per_lane) w[t] = __ldcs(weights + GROUP_LANES * t);
    wait_for_previous();
    if (prequantized) {
        for (int c = threadIdx.x; c < K / 16; c += THREADS) xq[c] = reinterpret_cast<const int4*>(xq_global)[c];
        for (int b = threadIdx.x; b < K / 32; b += THREADS) xd[b] = xd_global[b];
    } else {
        for (int b = warp; b < K / 32; b += THREADS / 32) quantize_block(x, reinterpret_cast<signed char*>(xq), xd, b, lane);
    }
    __syncthreads();
    float acc = 0.0f;
    #pragma unroll
    for (int t = 0; t < DEPTH; ++t) {
        if (t < per_lane) {
            const int c = first + glane + GROUP_LANES * t;
            const int4 a = xq[c];
            int s = __dp4a((int)w[t].x, a.x, 0);
            s = __dp4a((int)w[t].y, a.y, s);
            s = __dp4a((int)w[t].z, a.z, s);
            s = __dp4a((int)w[t].w, a.w, s);
            acc += xd[c >> 1] * (float)s;
        }
    }
    for (int offset = GROUP_LANES / 2; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (glane == 0) partial[group] = acc;
    __syncthreads();
    if (part == 0 && glane == 0 && row < N) {
        float total = 0.0f;
        for (int p = 0; p < split; ++p) total += partial[group + p];
        out[row] = float_to_bf16(total * scales[row]);
    }
}
"""


def compile_kernels(rows: int, depth: int, min_blocks: int) -> dict[str, object]:
    major, minor = torch.cuda.get_device_capability()
    text = "".join(f"#define {k} {v}\n" for k, v in {
        "THREADS": THREADS, "GROUP_LANES": GROUP_LANES, "MAX_K": MAX_K, "ROWS": rows, "DEPTH": depth, "MIN_BLOCKS": min_blocks,
    }.items()) + KERNELS.replace('#include "common.cuh"\n', read("common.cuh"))
    return {name: _load(*nvrtc_compile(text, name, f"{major}{minor}")) for name in ("rows_product", "quantize_row", "dp4a_product")}


def split_for(columns: int, depth: int) -> int:
    split = 1
    while columns > GROUP_LANES * 16 * depth * split:
        split *= 2
    return split


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    report: dict[str, object] = {"device": torch.cuda.get_device_name(), "shapes": {}}
    matvec = Matvec.create(device, torch.bfloat16)
    assert matvec is not None
    variants = {"rows1_depth8": (1, 8, 4), "rows2_depth4": (2, 4, 4), "rows2_depth8": (2, 8, 2), "rows4_depth2": (4, 2, 4)}
    built = {name: compile_kernels(*spec) for name, spec in variants.items()}
    for rows_n, columns in SHAPES:
        weight = (torch.randn((rows_n, columns), device=device) * 0.02).to(torch.bfloat16)
        int8 = Int8Matrix.empty(rows_n, columns, device)
        quantize_rows(weight, int8.values, int8.scales)
        x = torch.randn((1, columns), device=device).to(torch.bfloat16)
        exact = (int8.values.double() * int8.scales.double()[:, None]) @ x.double()[0]
        one_step = exact.abs().float().clamp_min(1e-30) * 2 ** -8  # one bf16 step, about
        entry: dict[str, object] = {}

        def record(name: str, run, out: torch.Tensor) -> None:
            us = graphs.per_call_us(device, run)
            run()
            torch.cuda.synchronize()
            error = (out.double().reshape(-1) - exact).abs()
            entry[name] = {
                "us": us,
                "gb_per_s": int8.values.numel() / us / 1e3,
                "max_error_in_bf16_steps": float((error.float() / one_step).max()),
                "relative_error": float(error.norm() / exact.norm()),
            }

        out = torch.empty((1, rows_n), device=device, dtype=torch.bfloat16)
        engine_out: list[torch.Tensor] = [out]

        def engine_run() -> None:
            engine_out[0] = matvec(x, int8)

        engine_run()
        us = graphs.per_call_us(device, engine_run)
        engine_result = matvec(x, int8)
        torch.cuda.synchronize()
        error = (engine_result.double().reshape(-1) - exact).abs()
        entry["engine"] = {"us": us, "gb_per_s": int8.values.numel() / us / 1e3,
                           "max_error_in_bf16_steps": float((error.float() / one_step).max()),
                           "relative_error": float(error.norm() / exact.norm())}
        for name, (rows, depth, _) in variants.items():
            split = split_for(columns, depth)
            per_block = (THREADS // GROUP_LANES) // split * rows
            kernel = built[name]["rows_product"]
            grid = (-(-rows_n // per_block), 1, 1)

            def run(kernel=kernel, grid=grid, split=split) -> None:
                launch_after_previous(kernel, grid, (THREADS, 1, 1), [int8.values, int8.scales, x, out, rows_n, columns, split])

            record(name, run, out)
            entry[name]["bitwise_equal_to_engine"] = bool(torch.equal(out, engine_result)) if name == "rows1_depth8" else None
        xq = torch.empty((columns,), device=device, dtype=torch.int8)
        xd = torch.empty((columns // 32,), device=device, dtype=torch.float32)
        kernels = built["rows1_depth8"]
        split = split_for(columns, 8)
        grid = (-(-rows_n // ((THREADS // GROUP_LANES) // split)), 1, 1)
        for name, prequantized in (("dp4a", 0), ("dp4a_prequantized", 1)):
            if prequantized:
                launch_after_previous(kernels["quantize_row"], (-(-columns // THREADS), 1, 1), (THREADS, 1, 1), [x, xq, xd, columns])

            def run(prequantized=prequantized) -> None:
                launch_after_previous(kernels["dp4a_product"], grid, (THREADS, 1, 1),
                                      [int8.values, int8.scales, x, xq, xd, prequantized, out, rows_n, columns, split])

            record(name, run, out)
        bf16_out: list[torch.Tensor] = [out]

        def bf16_run() -> None:
            bf16_out[0] = matvec(x, weight)

        def cublas_run() -> None:
            bf16_out[0] = x @ weight.T

        for name, run in (("bf16_engine", bf16_run), ("cublas_bf16", cublas_run)):
            if name == "bf16_engine" and not matvec.supports(columns):
                continue
            us = graphs.per_call_us(device, run)
            entry[name] = {"us": us, "gb_per_s": weight.numel() * 2 / us / 1e3}
        report["shapes"][f"{rows_n}x{columns}"] = entry
        print(f"{rows_n}x{columns}", json.dumps({k: round(v["us"], 2) for k, v in entry.items()}), flush=True)
    print(json.dumps(report, indent=1))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
