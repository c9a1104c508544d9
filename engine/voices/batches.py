"""Which samples a training step sees: the held-out split, and batches sized by tokens.

The whole run's plan (every step's samples) follows from the samples, the seed and the budget alone, so a
resumed run takes exactly the batches an uninterrupted one would have, and nothing about the order has to be
saved with a checkpoint. Batches hold as many samples as fit a budget of padded positions (the backbone's
cost) and of audio frames (the depthformer runs 8 positions per frame), so memory is bounded by the budget
whatever the clips' lengths.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.voices.samples import VoiceSample

# Share of the clips held out to measure how the voice does on speech it did not train on.
HELD_OUT_SHARE = 0.08
MAX_HELD_OUT = 24  # their loss is measured at every checkpoint: keep that pass short
MIN_CLIPS_FOR_HELD_OUT = 3


@dataclass(frozen=True)
class TokenBudget:
    positions: int  # padded positions of a batch (rows × the longest row)
    audio_frames: int  # audio frames of a batch


def split_held_out(samples: Sequence[VoiceSample]) -> tuple[list[VoiceSample], list[VoiceSample]]:
    """(training, held-out): the held-out clips chosen by a hash of their names, so that adding clips later
    leaves the earlier choice as it was."""
    if len(samples) < MIN_CLIPS_FOR_HELD_OUT:
        return list(samples), []
    count = min(MAX_HELD_OUT, max(1, round(len(samples) * HELD_OUT_SHARE)))
    ranked = sorted(samples, key=lambda s: hashlib.sha256(s.name.encode("utf-8")).hexdigest())
    held = {id(s) for s in ranked[:count]}
    return [s for s in samples if id(s) not in held], [s for s in samples if id(s) in held]


def fits(batch: Sequence[VoiceSample], budget: TokenBudget) -> bool:
    longest = max(s.positions for s in batch)
    return longest * len(batch) <= budget.positions and sum(s.audio_frames for s in batch) <= budget.audio_frames


def epoch_batches(samples: Sequence[VoiceSample], budget: TokenBudget, *, seed: int, epoch: int) -> list[list[int]]:
    """One pass over `samples` (indices into it) in an order drawn from (seed, epoch), packed greedily into
    batches within `budget`. A sample larger than the budget alone makes a batch of one."""
    order = list(range(len(samples)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        candidate = current + [index]
        if current and not fits([samples[i] for i in candidate], budget):
            batches.append(current)
            candidate = [index]
        current = candidate
    if current:
        batches.append(current)
    return batches


def plan_steps(samples: Sequence[VoiceSample], budget: TokenBudget, *, steps: int, seed: int) -> list[list[int]]:
    """The batches of steps 1..`steps`: whole epochs one after another, the last one cut where the steps end."""
    plan: list[list[int]] = []
    epoch = 0
    while len(plan) < steps and samples:
        plan.extend(epoch_batches(samples, budget, seed=seed, epoch=epoch))
        epoch += 1
    return plan[:steps]


def steps_per_epoch(samples: Sequence[VoiceSample], budget: TokenBudget, *, seed: int = 0) -> int:
    return len(epoch_batches(samples, budget, seed=seed, epoch=0))


def default_steps(samples: Sequence[VoiceSample], budget: TokenBudget, *, epochs: float, at_least: int = 1) -> int:
    return max(at_least, math.ceil(steps_per_epoch(samples, budget) * epochs))


def collate(batch: Sequence[VoiceSample]):
    """The batch as the model's forward takes it (liquid-audio's LFM2AudioModelInput), each row padded to the
    longest as liquid-audio's own loader pads to the context: text token 0 in text modality, unsupervised.
    (Its `lfm2_collator` would do the concatenation, but its module imports the `datasets` library and pads
    every row to the whole context length.) Right padding changes nothing the real positions see: the
    backbone and its convolutions are causal."""
    from liquid_audio.data.types import LFM2AudioModelInput
    from liquid_audio.utils import LFMModality

    longest = max(s.positions for s in batch)
    texts, flags, masks = [], [], []
    for sample in batch:
        pad = longest - sample.positions
        texts.append(torch.nn.functional.pad(sample.text, (0, pad)))
        flags.append(torch.nn.functional.pad(sample.modality_flag, (0, pad), value=int(LFMModality.TEXT)))
        masks.append(torch.nn.functional.pad(sample.supervision_mask, (0, pad), value=False))
    return LFM2AudioModelInput(
        text=torch.cat(texts, dim=1),
        audio_in=torch.empty((128, 0), dtype=torch.float32),
        audio_in_lens=torch.empty((0,), dtype=torch.long),
        audio_out=torch.cat([s.audio_out for s in batch], dim=1),
        modality_flag=torch.cat(flags, dim=0),
        supervision_mask=torch.cat(masks, dim=0),
    )
