"""Does the programmatic dependent launch of the backbone's kernels keep their order, eagerly and in a CUDA
graph, and does it matter where a kernel triggers its dependents (H200 probe)?

For each variant (the shipped kernels, which never trigger, so a dependent starts once every block
has exited; a trigger just before or just after `wait_for_previous`; plain launches), a chain of a
PyTorch kernel, matrix-vector products and RMS norms, each reading what the one before wrote, runs
eagerly and as 20 graph replays; each result is compared with the chain launched plainly. Also reports
the __CUDA_ARCH__ that PyTorch's NVRTC build sees and the chain's replay time per variant. Writes
$OUT/probe_dependent_launch.json. Run 41 (with the trigger at block start instead of before the wait):
eagerly every variant was right; in graphs the early trigger gave 0 of 20 right replays, the others 20.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.realtime import graphs
from engine.realtime.kernels import Matvec, RmsNormRow, runtime, sources

ARCH_SOURCE = 'extern "C" __global__ void arch(int* out) { out[0] = __CUDA_ARCH__; }'


WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'
VARIANTS = {"shipped": WAIT, "trigger_before_the_wait": TRIGGER + WAIT, "trigger_after_the_wait": WAIT + TRIGGER, "plain_launches": WAIT}


def compiled(name: str, wait: str):
    source = sources.source(name)
    assert source.count(WAIT) == 1
    return torch.cuda._compile_kernel(source.replace(WAIT, wait), name)


@torch.inference_mode()
def main() -> None:
    device = torch.device("cuda")
    results: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    arch = torch.zeros((1,), dtype=torch.int32, device=device)
    torch.cuda._compile_kernel(ARCH_SOURCE, "arch")(grid=(1, 1, 1), block=(1, 1, 1), args=[arch])
    results["cuda_arch_seen_by_the_build"] = int(arch.item())
    results["dependent_launch_available"] = runtime._dependent_launch(torch.cuda.current_device()) is not None
    matvec = Matvec.create(device, torch.bfloat16)
    norm = RmsNormRow.create(2048, device, torch.bfloat16)
    generator = torch.Generator(device=device).manual_seed(11)
    x = torch.randn((1, 2048), device=device, generator=generator).to(torch.bfloat16)
    weights = [(torch.randn((2048, 2048), device=device, generator=generator) / 45).to(torch.bfloat16) for _ in range(6)]
    gain = torch.randn((2048,), device=device, generator=generator).to(torch.bfloat16)

    def chain() -> torch.Tensor:
        h = x * 3
        for weight in weights:
            h = matvec(h, weight, h[0])
            h = norm(h, gain, 1e-5)
        return matvec(h, weights[0], None, gain, 1e-5)

    runtime._dependent_launch_failed.append("plain reference")
    reference = chain().clone()
    runtime._dependent_launch_failed.clear()
    shipped = (matvec.kernel, norm.kernel)
    for name, wait in VARIANTS.items():
        if name == "plain_launches":
            runtime._dependent_launch_failed.append("plain launches")
        matvec.kernel, norm.kernel = compiled("matvec", wait), compiled("rms_norm_row", wait)
        eager_equal = all(torch.equal(chain(), reference) for _ in range(20))
        graphs.warm_up(device, chain)
        graph, out = graphs.capture(chain)
        replays_equal = 0
        for _ in range(20):
            out.zero_()
            graph.replay()
            replays_equal += int(torch.equal(out, reference))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            graph.replay()
        end.record()
        end.synchronize()
        results[name] = {"eager_equal_to_plain": eager_equal, "replays_equal_to_plain_of_20": replays_equal,
                         "replay_us": start.elapsed_time(end) * 1000 / 50}  # fmt: skip
        print(name, results[name], flush=True)
        del graph, out
        runtime._dependent_launch_failed.clear()
    matvec.kernel, norm.kernel = shipped
    print(json.dumps(results, indent=1))
    (Path(os.environ.get("OUT", ".")) / "probe_dependent_launch.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
