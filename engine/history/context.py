"""Between the model's conversation (engine.chat.conversation) and what the history keeps of it.

An assistant turn is saved as the model produced it: every generated text token and audio frame, in
order. A user turn is its take's audio (re-embedded on continuation by the same feature extractor a
live take goes through). `saved_exchanges` turns a saved conversation back into (take, answer)
pairs that `ChatSession.restore` lays out exactly as the live turns were laid out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.chat.conversation import AudioOutPiece, Piece, TextPiece, Turn
from engine.history.store import CODEBOOKS, AssistantTokens, SavedConversation, SavedTurn
from engine.constants import END_OF_AUDIO


def tokens_of_turn(turn: Turn) -> AssistantTokens:
    """The generated part of a closed assistant turn (between its opening and `<|im_end|>`)."""
    generated = turn.pieces[1:-1]
    kinds = bytearray()
    text: list[int] = []
    frames: list[np.ndarray] = []
    for piece in generated:
        if isinstance(piece, TextPiece):
            kinds.append(0)
            text.extend(piece.ids)
            if len(piece.ids) != 1:
                raise ValueError("a generated text piece holds one token")
        elif isinstance(piece, AudioOutPiece):
            kinds.append(1)
            frames.append(piece.codes.detach().to("cpu").numpy().reshape(CODEBOOKS))
        else:
            raise ValueError("an assistant turn holds no user audio")
    codes = np.stack(frames) if frames else np.zeros((0, CODEBOOKS), np.int16)
    return AssistantTokens(np.asarray(text, np.int32), codes, bytes(kinds))


def pieces_of_tokens(tokens: AssistantTokens) -> list[Piece]:
    """The generated pieces back, as `ChatSession` appended them while generating."""
    pieces: list[Piece] = []
    text = iter(tokens.text_tokens.tolist())
    frames = iter(tokens.audio_codes)
    for kind in tokens.piece_kinds:
        if kind == 0:
            pieces.append(TextPiece([next(text)]))
        else:
            pieces.append(AudioOutPiece(torch.from_numpy(np.asarray(next(frames), dtype=np.int64))))
    return pieces


@dataclass
class SavedExchange:
    """One user take and the answer to it, ready to be laid out again."""

    take_16k: np.ndarray
    answer: AssistantTokens


@dataclass
class RestorePlan:
    system_prompt: str
    exchanges: list[SavedExchange]
    skipped: int  # exchanges that cannot be restored (the take's audio is missing, no answer saved)


def saved_exchanges(saved: SavedConversation, *, vocabulary: int, codebook_size: int = END_OF_AUDIO) -> RestorePlan:
    """Pair each user take with the answer that followed it. An exchange whose take audio is missing or
    whose answer was never saved (the app was killed mid-answer) cannot be given back to the model; it
    is still shown, and counted in `skipped`. Token ids outside the model's vocabulary (another model's
    conversation, a damaged row) are refused here rather than failing inside the embedding."""
    exchanges: list[SavedExchange] = []
    skipped = 0
    pending: SavedTurn | None = None
    for turn in saved.turns:
        if turn.role == "user":
            if pending is not None:
                skipped += 1  # a take with no answer after it
            pending = turn
            continue
        if pending is None:
            skipped += 1
            continue
        usable = (pending.pcm is not None and turn.tokens is not None
                  and _tokens_fit(turn.tokens, vocabulary, codebook_size))
        if usable:
            exchanges.append(SavedExchange(pending.pcm, turn.tokens))  # type: ignore[arg-type]
        else:
            skipped += 1
        pending = None
    if pending is not None:
        skipped += 1
    return RestorePlan(saved.system_prompt, exchanges, skipped)


def _tokens_fit(tokens: AssistantTokens, vocabulary: int, codebook_size: int) -> bool:
    text_ok = tokens.text_tokens.size == 0 or (0 <= int(tokens.text_tokens.min()) and int(tokens.text_tokens.max()) < vocabulary)
    codes_ok = tokens.audio_codes.size == 0 or (0 <= int(tokens.audio_codes.min()) and int(tokens.audio_codes.max()) <= codebook_size)
    return text_ok and codes_ok
