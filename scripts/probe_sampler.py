"""GPU probe (issue 29): the sampler's one block against its blocks (sampler.cu), µs per launch.

For the text row (65,536 logits) and the audio row (2049), each kernel in a CUDA graph of 20 launches on
the same row, replayed 50 times; top-k 4 (the app's default) and 64 (its largest); and whether both chose
the plain ops' index (run 64 timed it with a copy of `graphs.per_call_us`, the helper it calls now). The one-block kernel runs where a row fits one slice; the probe says what the blocks'
kernel would cost there (one block). Run on the GPU machine: `python3 scripts/probe_sampler.py OUT.json`.
"""

from __future__ import annotations

import json
import sys

import torch

from engine.realtime import graphs
from engine.realtime.kernels.sources import SAMPLER_GRID_SLICE, SAMPLER_GRID_THREADS, SAMPLER_THREADS
from engine.realtime.sampling import DeviceSampling

LAUNCHES = 20


@torch.inference_mode()
def main() -> None:
    device = torch.device("cuda")
    sampling = DeviceSampling(device)
    fused = sampling.fused
    assert fused is not None and fused.grid_kernel is not None
    report: dict[str, object] = {"device": torch.cuda.get_device_name(device)}
    generator = torch.Generator(device=device).manual_seed(3)
    for n in (65536, 2049):
        logits = (torch.randn(n, device=device, generator=generator) * 3).to(torch.bfloat16)
        noise = torch.empty(n, device=device)
        out = torch.empty(1, dtype=torch.long, device=device)
        reference = torch.empty(1, dtype=torch.long, device=device)
        blocks = -(-n // SAMPLER_GRID_SLICE)
        candidates, counts, arrived = fused._buffers(blocks, device)

        def one_block() -> None:
            fused.kernel(grid=(1, 1, 1), block=(SAMPLER_THREADS, 1, 1), args=[logits, noise, sampling.inv_temperature, sampling.top_k_index, out, n])

        def over_blocks() -> None:
            fused.grid_kernel(
                grid=(blocks, 1, 1), block=(SAMPLER_GRID_THREADS, 1, 1),
                args=[logits, noise, sampling.inv_temperature, sampling.top_k_index, out, n, candidates, counts, arrived],
            )  # fmt: skip

        for top_k in (4, 64):
            sampling.set(greedy=False, temperature=1.0, top_k=top_k)
            sampling.noise_for(noise)
            sampling.choose_reference(logits, noise, out=reference)
            entry: dict[str, object] = {"blocks": blocks}
            for name, run in (("one_block", one_block), ("over_blocks", over_blocks)):
                out.fill_(-1)
                run()
                entry[f"{name}_agrees"] = bool(torch.equal(out, reference))
                entry[f"{name}_us"] = graphs.per_call_us(device, run, calls=LAUNCHES, replays=50)
            report[f"n_{n}_top_k_{top_k}"] = entry
            print(n, top_k, json.dumps(entry), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
