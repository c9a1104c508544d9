"""Probe (GPU): what CUDA libraries add to a process's device memory beside torch's allocator.

Each variant is a fresh process: CUDA initialised, then the listed operations once; device memory by the
driver's count (mem_get_info: total - free, alone on the GPU) minus the allocator's reserved bytes.
Answers whether turning cuDNN off for the audio encoder's convolutions would save memory worth having.
"""

from __future__ import annotations

import json
import subprocess
import sys

VARIANTS = {
    "init": [],
    "matmul": ["matmul"],
    "matmul+conv_cudnn": ["matmul", "conv"],
    "matmul+conv_no_cudnn": ["matmul", "conv_nocudnn"],
    "matmul+conv_cudnn+fft": ["matmul", "conv", "fft"],
}


def child(ops: list[str]) -> dict:
    import torch

    torch.cuda.init()
    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    for op in ops:
        if op == "matmul":
            (x @ x.t()).sum().item()
        elif op in ("conv", "conv_nocudnn"):
            torch.backends.cudnn.enabled = op == "conv"
            conv = torch.nn.Conv2d(1, 256, 3, stride=2, padding=1).cuda()
            conv(torch.randn(1, 1, 400, 128, device="cuda")).sum().item()
            conv1 = torch.nn.Conv1d(512, 512, 9, groups=512, padding=4).cuda()
            conv1(torch.randn(1, 512, 300, device="cuda")).sum().item()
        elif op == "fft":
            w = torch.randn(24000, device="cuda")
            spec = torch.stft(w, 1920, hop_length=480, window=torch.hann_window(1920, device="cuda"), return_complex=True)
            torch.istft(spec, 1920, hop_length=480, window=torch.hann_window(1920, device="cuda")).sum().item()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"driver_used_gb": (total - free) / 1e9, "reserved_gb": torch.cuda.memory_reserved() / 1e9}


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(child(json.loads(sys.argv[1]))))
        return
    results = {}
    for name, ops in VARIANTS.items():
        out = subprocess.run([sys.executable, __file__, json.dumps(ops)], capture_output=True, text=True, timeout=120)
        results[name] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-500:]}
        if "driver_used_gb" in results[name]:
            results[name]["outside_allocator_gb"] = results[name]["driver_used_gb"] - results[name]["reserved_gb"]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
