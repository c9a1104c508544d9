"""`voicechat bench`: eager vs recipe vs engine, side by side, in one run, on the full-size model.

By concern, each module readable alone:
- `workload`: the workload every mode runs (schedule, takes, 12 blocks of 108 frames, five turns) and the
  measuring helpers (CUDA-event timing, memory, copy bandwidth, bytes per stage);
- `baselines`: the eager mode (liquid-audio's `generate_interleaved`) and the recipe mode (the published
  method, `recipe`: liquid-audio's loop with the depthformer frame and the backbone step captured);
- `engine_mode`: this product's ChatSession, its start-up timed, turns, stages and kernels measured;
- `long_conversation`: many turns at the 4096-token context, through trims;
- `cards`: the per-card ESTIMATE from the H200 run; `report`: bench.json and bench.md;
- `run`: the main flow (`run_bench`), and SECTIONS, where further sections hook in;
- `random_model`: full-size random weights from the reference config; `recipe`: the published recipe.
"""

from engine.bench.cards import CARDS, estimate_cards
from engine.bench.engine_mode import EngineBench
from engine.bench.run import SECTIONS, run_bench
from engine.bench.workload import Workload, make_workload

__all__ = ["CARDS", "SECTIONS", "EngineBench", "Workload", "estimate_cards", "make_workload", "run_bench"]
