"""Child processes for tests/test_history_store.py: real processes writing the real store.

    python tests/history_child.py writer FOLDER UID TURNS SEED    save turns as fast as possible
    python tests/history_child.py answer FOLDER MODEL_DIR          demo-model turns until killed
    python tests/history_child.py diskfull FOLDER                  the disk-full scenario (in a tmpfs)

Each prints one line per event and flushes, so the parent knows how far it got when it kills it.
"""

from __future__ import annotations

import json
import os
import queue
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _turns(seed: int):
    from engine.history.store import AssistantTokens, TurnToSave

    rng = np.random.default_rng(seed)
    while True:
        take = (rng.standard_normal(int(16000 * rng.uniform(0.5, 3.0))) * 0.1).astype(np.float32)
        yield TurnToSave("user", take, 16000)
        frames = int(rng.integers(5, 60))
        kinds = np.array([0] * 6 + [1] * frames, np.uint8)
        rng.shuffle(kinds)
        tokens = AssistantTokens(rng.integers(0, 500, int((kinds == 0).sum())), rng.integers(0, 2049, (frames, 8)),
                                 kinds.tobytes())
        answer = (rng.standard_normal(frames * 1920) * 0.1).astype(np.float32)
        yield TurnToSave("assistant", answer, 24000, text="応答 " * int(rng.integers(1, 9)), tokens=tokens)


def writer(folder: str, uid: str, count: int, seed: int) -> None:
    from engine.history.store import ConversationMeta, HistoryStore

    meta = ConversationMeta(uid, "prompt", "demo (random weights)")
    with HistoryStore(Path(folder)) as store:
        for n, turn in enumerate(_turns(seed), start=1):
            if count and n > count:
                return
            row = store.save_turn(meta, turn)
            print(f"saved {row}", flush=True)


def answer(folder: str, model_dir: str) -> None:
    import torch

    torch.set_num_threads(1)
    from conftest import sine
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.history.audio import canonical_take
    from engine.history.service import HistoryKeeper
    from engine.model.loading import load_model
    from engine.protocol import SamplingSettings
    from engine.realtime.backend import GraphedBackend
    from engine.chat.session import ChatSession, TextPieceOut, TurnDone

    loaded = load_model(Path(model_dir), device="cpu")
    session = ChatSession(loaded, GraphedBackend(loaded, context_tokens=2048, capture=False),
                          make_audio_decoder(loaded, use_cuda_graphs=False), context_tokens=2048,
                          fallback_reason="test", graphs_ready=False, model_id=None)
    events: queue.Queue[object] = queue.Queue()
    keeper = HistoryKeeper(events.put, Path(folder))
    keeper.start()
    for n in range(1, 100):
        take = canonical_take(sine(0.5, 16000, 200.0 + 100 * n))
        keeper.user_take(2 * n - 1, take, 16000, session, 0.0)
        pcm: list[np.ndarray] = []
        text = ""
        for out in session.respond(take, SamplingSettings(greedy=True), max_new_tokens=60 if n < 3 else 100_000):
            if isinstance(out, TextPieceOut):
                text += out.text
                if n >= 3:
                    print("generating", flush=True)  # the parent kills us in the middle of this answer
            elif isinstance(out, TurnDone):
                pass
            elif hasattr(out, "pcm"):
                pcm.append(out.pcm)
        audio = np.concatenate(pcm) if pcm else np.zeros(0, np.float32)
        keeper.answer(2 * n, audio, 24000, text=text, cancelled=False, generated_samples=len(audio), session=session,
                      sampling=SamplingSettings(greedy=True), started_at=0.0)
        keeper.flush()
        print(f"turn {n} saved", flush=True)


def diskfull(folder: str) -> None:
    """Runs in a small tmpfs: fill it, save (must wait, chat goes on), free it, save again (all saved)."""
    from engine import protocol as p
    from engine.history.service import HistoryKeeper
    from engine.history.store import HistoryStore

    class Session:  # what HistoryKeeper reads of a ChatSession: its info, prompt and conversation
        system_prompt = "prompt"
        info = p.EngineInfo("CPU", None, False, None, "demo (random weights)", None, 4096)

        class conversation:
            turns: list[object] = []

    events: queue.Queue[object] = queue.Queue()
    keeper = HistoryKeeper(events.put, Path(folder) / "history")
    keeper.start()
    turns = _turns(1)
    report: dict[str, object] = {}

    def save_exchange(n: int) -> None:
        for turn, live in ((next(turns), 2 * n - 1), (next(turns), 2 * n)):
            if turn.role == "user":
                keeper.user_take(live, turn.pcm, turn.sample_rate, Session, 0.0)
            else:
                keeper.answer(live, turn.pcm, turn.sample_rate, text=turn.text, cancelled=False,
                              generated_samples=len(turn.pcm), session=Session, sampling=p.SamplingSettings(),
                              started_at=0.0)

    save_exchange(1)
    keeper.flush()
    filler = Path(folder) / "filler"
    with open(filler, "wb") as f:  # fill the disk completely
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as error:
            report["fill_error"] = error.errno
    try:
        with open(filler, "ab") as f:  # the last few bytes too
            while True:
                f.write(b"\0" * 512)
                f.flush()
    except OSError:
        pass
    for n in (2, 3):
        save_exchange(n)
    keeper.flush()
    report["paused_while_full"] = keeper.paused
    drained = []
    while not events.empty():
        drained.append(events.get())
    report["errors_while_full"] = [e.template for e in drained if isinstance(e, p.EngineError)]
    filler.unlink()
    save_exchange(4)
    keeper.flush()
    report["paused_after"] = keeper.paused
    drained = []
    while not events.empty():
        drained.append(events.get())
    report["status_after"] = [e.paused for e in drained if isinstance(e, p.HistoryStatus)]
    keeper.close()
    with HistoryStore(Path(folder) / "history") as store:
        (summary,) = store.list_conversations()
        saved = store.load(summary.id)
        report["turns"] = [t.role for t in saved.turns]
        report["audio_missing"] = [t.audio_missing for t in saved.turns]
        report["integrity"] = store.integrity_check()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if mode == "writer":
        writer(args[0], args[1], int(args[2]), int(args[3]))
    elif mode == "answer":
        answer(args[0], args[1])
    elif mode == "diskfull":
        diskfull(args[0])
    else:
        raise SystemExit(f"unknown mode {mode}")
