"""The int8 precision's audio detokenizer (transformer in bfloat16) against the float32 one, on the CPU.

The full-size detokenizer of the reference config (bench/lfm2.5-audio-1.5b-jp.config.json: 8 layers, hidden 512,
FFN 2304) with random weights, seed by seed: the same random code frames are streamed through
`StreamingDetokenizer` over the float32 module and over a copy in the int8 precision's dtypes
(`set_detokenizer_precision`), and the SNR of the whole streamed utterance (the frames' chunks and the flush)
of the bf16 one against the float32 one is printed, with that of liquid-audio's own whole-utterance forward
of the two modules. Two kinds of random weights: transformers' init (as `random_full_size_model` builds the
detokenizer) and the same conditioned like a trained model (`condition_detokenizer_like_a_trained_model`),
then with its output head's gain raised so that the log-magnitudes and angles spread by 1 and by 3.
This is what the int8 check's decoder threshold is set from (engine/chat/precision_check.py, `Thresholds`).

    .venv/bin/python bench/probes/measure_detokenizer_bf16.py [--seeds 5] [--frames 50] [--out result.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from engine.bench.random_model import REFERENCE_CONFIG, condition_detokenizer_like_a_trained_model
from engine.chat.precision_check import snr_db
from engine.model.loading import set_detokenizer_precision
from engine.model.store import build_detokenizer_from_config
from engine.realtime.streaming_decoder import CODEBOOK_SIZE, NUM_CODEBOOKS, StreamingDetokenizer


def streamed(detokenizer: torch.nn.Module, codes: torch.Tensor) -> torch.Tensor:
    decoder = StreamingDetokenizer(detokenizer)
    chunks = [decoder.step(codes[:, i]).clone() for i in range(codes.shape[1])]
    return torch.cat([*chunks, decoder.flush()])


@torch.no_grad()
def measure(seed: int, frames: int, conditioned: bool, head_std: float | None) -> dict[str, Any]:
    config = json.loads(Path(REFERENCE_CONFIG).read_text())["audio_detokenizer"]
    torch.manual_seed(seed)
    float32 = build_detokenizer_from_config(config, device="cpu").eval()
    if conditioned:
        condition_detokenizer_like_a_trained_model(float32)
    if head_std is not None:
        # The head's gain sets how far a bf16 rounding of the hidden state moves the log-magnitudes and the
        # angles: scaled so that they spread by `head_std` (transformers' init gives ~0.45; a trained
        # vocoder's log-magnitudes span several nats).
        float32.lin.weight.mul_(head_std / (float32.lin.weight.std() * float32.lin.in_features**0.5))
    bf16 = set_detokenizer_precision(copy.deepcopy(float32), "int8")
    assert StreamingDetokenizer(bf16).dtype == torch.bfloat16
    codes = torch.randint(0, CODEBOOK_SIZE, (NUM_CODEBOOKS, frames), generator=torch.Generator().manual_seed(1000 + seed))
    reference = streamed(float32, codes)
    whole = float32(codes[None])[0]
    return {
        "seed": seed,
        "frames": frames,
        "head_std": head_std,
        "rms": float(reference.square().mean().sqrt()),
        "streamed_snr_db": snr_db(reference, streamed(bf16, codes)),
        "whole_snr_db": snr_db(whole, bf16(codes[None])[0]),
        "float32_streamed_vs_whole_snr_db": snr_db(whole, reference),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    results: dict[str, Any] = {}
    variants = {"transformers_init": (False, None), "conditioned": (True, None), "conditioned_head_std_1": (True, 1.0),
                "conditioned_head_std_3": (True, 3.0)}
    for name, (conditioned, head_std) in variants.items():
        runs = [measure(seed, args.frames, conditioned, head_std) for seed in range(args.seeds)]
        for run in runs:
            print(name, json.dumps(run), flush=True)
        snrs = [run["streamed_snr_db"] for run in runs]
        results[name] = {"runs": runs, "streamed_snr_db_min": min(snrs), "streamed_snr_db_median": statistics.median(snrs)}
        print(f"{name}: streamed SNR min {min(snrs):.1f} dB, median {statistics.median(snrs):.1f} dB", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
