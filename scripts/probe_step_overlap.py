"""GPU probe (issue 29): what holds the int8 products of the backbone step at ~2.4 TB/s?

Runs 67-69 found each int8 product paying ~3-4 µs of fill and drain, the weights streaming at ~2.9 TB/s in
between, and neither the arithmetic (tensor cores) nor the bytes in flight per SM setting it. Timed here on the
real int8 decode step (true size, random weights, `GraphedBackend`'s own graphs recaptured per variant):
* `engine`: as shipped (the conv layers' in-projection with the conv step as its epilogue, matvec_conv_int8);
* `conv off`: the in-projection and short_conv_step as two kernels (10 kernels a step more);
* `walkers 1`: one walking block per SM (the next product's blocks resident beside ours; run 83: slower);
* `l2 ahead`: each walking block asks L2 for its later tiles at its start (matvec.cu's L2_AHEAD; run 83: slower);
* `tiled`: the same loads, but as if each tile's rows were stored chunk-interleaved, so that a block's load step
  reads one contiguous run (matvec.cu's TILED_PROBE; wrong results, for the memory's locality only);
* `hint`: weights loaded with ld.global.nc.L1::no_allocate.L2::256B instead of __ldcs (LOAD_HINT);
* `single buffer`: walking blocks with one register buffer (SINGLE_BUFFER: the next tile's loads issued as the
  current one is multiplied) at 64 or 80 registers, so that the next product's blocks fit beside ours.
Run 84 (commit d70af91) timed walkers 1, l2 ahead, tiled and hint (all slower); this version times the single
buffer.
Per variant: the decode step's graph, the text head's and the audio head's (ms, median of 30 x 10 replays), and
whether the step's output is bitwise the engine's. Writes $OUT/probe_step_overlap.json.
Run on the GPU machine: `python3 scripts/probe_step_overlap.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.bench.random_model import random_full_size_model
from engine.bench.run import _int8_copy
from engine.bench.workload import median_ms
from engine.model.loading import use_expandable_cuda_segments
from engine.realtime import graphs
from engine.realtime.backend import GraphedBackend
from engine.realtime.kernels import compile_in_background, sources
from engine.realtime.kernels.runtime import _load, nvrtc_compile

NAMES = ("matvec_int8", "matvec_gated_int8", "matvec_conv_int8")
ATTRIBUTES = ("int8_kernel", "gated_int8_kernel", "conv_int8_kernel")


def built(defines: dict[str, int]) -> tuple[object, ...]:
    arch = "".join(map(str, torch.cuda.get_device_capability()))
    kernels = []
    for name in NAMES:
        kernel = sources.KERNELS[name]
        text = sources.defines({**kernel.defines, **defines}) + sources.read(kernel.file)
        kernels.append(_load(*nvrtc_compile(text, name, arch)))
    return tuple(kernels)


@torch.inference_mode()
def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    device = torch.device("cuda")
    compile_in_background(device)
    loaded = _int8_copy(random_full_size_model())
    backend = GraphedBackend(loaded)
    engine = backend.backbone.matvec
    assert engine is not None and backend.text_product is engine
    shipped = tuple(getattr(engine, a) for a in ATTRIBUTES)
    conv_epilogue = backend.backbone.conv_epilogue
    backend.input.normal_()
    saved = backend.snapshot()

    def step_output() -> torch.Tensor:
        backend.restore(saved)
        backend.graphs["decode"].replay()
        torch.cuda.synchronize()
        return backend.hidden.clone()

    reference = step_output()
    report: dict[str, object] = {"device": torch.cuda.get_device_name(device), "sms": engine.sm_count, "variants": {},
                                 "conv_epilogue_agreed": conv_epilogue}
    variants = {  # name: (conv epilogue, walkers per SM, kernel defines)
        "engine": (True, 2, {}),
        "single buffer, 64 registers, walkers 2": (True, 2, {"SINGLE_BUFFER": 1, "MATVEC_MIN_BLOCKS": 4}),
        "single buffer, 64 registers, walkers 4": (True, 4, {"SINGLE_BUFFER": 1, "MATVEC_MIN_BLOCKS": 4}),
        "single buffer, 80 registers, walkers 2": (True, 2, {"SINGLE_BUFFER": 1, "MATVEC_MIN_BLOCKS": 3}),
        "single buffer, 80 registers, walkers 3": (True, 3, {"SINGLE_BUFFER": 1, "MATVEC_MIN_BLOCKS": 3}),
        "conv off": (False, 2, {}),
    }
    kernels = {name: built(defines) if defines else shipped for name, (_, _, defines) in variants.items()}
    for round_ in range(2):  # twice, in the same order: the spread between rounds is the probe's own
        for key, (conv, walkers, _) in variants.items():
            backend.backbone.conv_epilogue = conv and conv_epilogue
            products = [engine]
            if backend.depthformer.input_product is not None:
                products.append(backend.depthformer.input_product)
            for matvec in products:
                for attribute, kernel in zip(ATTRIBUTES, kernels[key]):
                    setattr(matvec, attribute, kernel)
                matvec.walkers_per_sm["int8"] = walkers
            for name in ("decode", "text_head", "audio_head"):
                backend.graphs.pop(name, None)
                backend.stage_standalone_run(name)
                graphs.warm_up(device, backend.steps[name])
                backend.graphs[name], _ = graphs.capture(backend.steps[name], pool=backend.graph_pool)
            backend.restore(saved)
            entry: dict[str, object] = {}
            for name in ("decode", "text_head", "audio_head"):
                backend.backbone.position.fill_(500)
                entry[f"{name}_ms"] = round(median_ms(backend.graphs[name].replay), 4)
            backend.restore(saved)
            entry["decode_bitwise_the_engine"] = bool(torch.equal(step_output(), reference))
            report["variants"].setdefault(key, []).append(entry)
            print(round_, key, json.dumps(entry), flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_step_overlap.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
