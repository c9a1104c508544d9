"""Multi-turn conversation state, laid out position by position as the backbone sees it.

The history is what liquid-audio's `ChatState` would hold for the same conversation (the same
strings tokenized the same way, the same audio features, the same generated tokens), but split
into turns so that (a) only positions not yet in the cache are prefilled on the next turn and
(b) the oldest whole turns can be dropped when the context is full.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch

from liquid_audio.utils import LFMModality, mel2emb_len

Role = Literal["system", "user", "assistant"]


@dataclass
class TextPiece:
    ids: list[int]

    @property
    def positions(self) -> int:
        return len(self.ids)


@dataclass
class AudioInPiece:
    """One user utterance as log-mel features (128, T); it becomes ceil(T/8) positions.

    `embeddings` keeps the backbone input rows the audio encoder made of it (positions, hidden), once it
    has been embedded: a rebuild of the cache after a trim prefills them again instead of re-running
    the conformer over every kept take.
    """

    mel: torch.Tensor
    embeddings: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def positions(self) -> int:
        return int(mel2emb_len(self.mel.shape[1]))


@dataclass
class AudioOutPiece:
    """One generated audio frame: 8 codes (2048 everywhere marks the end of the audio)."""

    codes: torch.Tensor

    @property
    def positions(self) -> int:
        return 1


Piece = TextPiece | AudioInPiece | AudioOutPiece


@dataclass
class Turn:
    role: Role
    pieces: list[Piece] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return sum(piece.positions for piece in self.pieces)


@dataclass
class PrefillInputs:
    """The keyword arguments of `LFM2AudioModel._prefill` for a span of positions."""

    text: torch.Tensor
    audio_in: torch.Tensor
    audio_in_lens: torch.Tensor
    audio_out: torch.Tensor
    modality_flag: torch.Tensor

    @property
    def positions(self) -> int:
        return int(self.modality_flag.shape[1])

    def as_kwargs(self) -> dict[str, torch.Tensor]:
        return {
            "text": self.text,
            "audio_in": self.audio_in,
            "audio_in_lens": self.audio_in_lens,
            "audio_out": self.audio_out,
            "modality_flag": self.modality_flag,
        }


@dataclass
class SpanLayout:
    """A span of positions as the host knows it: `modality` per position, the text ids, the user takes
    and the generated frames, each in the order they appear."""

    modality: list[int] = field(default_factory=list)
    text: list[int] = field(default_factory=list)
    takes: list[AudioInPiece] = field(default_factory=list)
    frames: list[torch.Tensor] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return len(self.modality)

    def codes(self, codebooks: int) -> torch.Tensor:
        """The frames' codes as (codebooks, frames) on the CPU."""
        return torch.stack(self.frames, 1) if self.frames else torch.empty((codebooks, 0), dtype=torch.long)


class Conversation:
    """The whole history: `<|startoftext|>`, then turns. Knows how to tokenize its own markup."""

    def __init__(self, tokenizer: object, *, codebooks: int = 8, mel_dtype: torch.dtype = torch.float32) -> None:
        self.tokenizer = tokenizer
        self.codebooks = codebooks
        self.mel_dtype = mel_dtype
        self.start = TextPiece(self.encode("<|startoftext|>"))
        self.turns: list[Turn] = []

    # ---------------------------------------------------------------- building

    def encode(self, text: str) -> list[int]:
        # Exactly as ChatState.add_text: no automatic special tokens.
        return list(self.tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]

    def add_text_turn(self, role: Role, text: str) -> Turn:
        turn = Turn(role, [TextPiece(self.encode(f"<|im_start|>{role}\n")), TextPiece(self.encode(text)), self._end_piece()])
        self.turns.append(turn)
        return turn

    def add_audio_turn(self, role: Role, mel: torch.Tensor, embeddings: torch.Tensor | None = None) -> Turn:
        """`embeddings`: the take's backbone input rows, when they were made with its features."""
        take = AudioInPiece(mel.to(self.mel_dtype), embeddings)
        turn = Turn(role, [TextPiece(self.encode(f"<|im_start|>{role}\n")), take, self._end_piece()])
        self.turns.append(turn)
        return turn

    def open_assistant_turn(self) -> Turn:
        turn = Turn("assistant", [TextPiece(self.encode("<|im_start|>assistant\n"))])
        self.turns.append(turn)
        return turn

    def close_assistant_turn(self) -> None:
        self.turns[-1].pieces.append(self._end_piece())

    def _end_piece(self) -> TextPiece:
        return TextPiece(self.encode("<|im_end|>\n"))

    # ---------------------------------------------------------------- reading

    @property
    def positions(self) -> int:
        return self.start.positions + sum(turn.positions for turn in self.turns)

    def layout(self, start: int) -> SpanLayout:
        """Every position from `start` to the end, on the host, in order.

        A user utterance is never split: the cache boundary always falls on a text token or an
        audio frame, because a whole turn is prefilled at once.
        """
        layout = SpanLayout()
        position = 0
        for piece in [self.start, *(p for turn in self.turns for p in turn.pieces)]:
            end = position + piece.positions
            if end > start:
                skip = max(0, start - position)
                if isinstance(piece, TextPiece):
                    layout.text.extend(piece.ids[skip:])
                    layout.modality.extend([LFMModality.TEXT] * (piece.positions - skip))
                elif isinstance(piece, AudioInPiece):
                    if skip:
                        raise ValueError("a prefill may not start inside a user utterance")
                    layout.takes.append(piece)
                    layout.modality.extend([LFMModality.AUDIO_IN] * piece.positions)
                else:
                    layout.frames.append(piece.codes)
                    layout.modality.append(LFMModality.AUDIO_OUT)
            position = end
        return layout

    def span(self, start: int, device: torch.device) -> PrefillInputs:
        """`LFM2AudioModel._prefill`'s inputs for every position from `start` to the end."""
        layout = self.layout(start)
        mels = [take.mel for take in layout.takes]
        return PrefillInputs(
            text=torch.tensor([layout.text], dtype=torch.long, device=device),
            audio_in=(torch.cat(mels, 1) if mels else torch.empty((128, 0), dtype=self.mel_dtype)).to(device),
            audio_in_lens=torch.tensor([m.shape[1] for m in mels], dtype=torch.long, device=device),
            audio_out=layout.codes(self.codebooks).to(device),
            modality_flag=torch.tensor([layout.modality], dtype=torch.long, device=device),
        )

    def audio_in_pieces(self, start: int = 0) -> Iterator[AudioInPiece]:
        """The user utterances among the positions from `start` on, in order (as `span` lays them out)."""
        position = self.start.positions
        for piece in (p for turn in self.turns for p in turn.pieces):
            if isinstance(piece, AudioInPiece) and position + piece.positions > start:
                yield piece
            position += piece.positions

    def drop_oldest_turns(self, positions_needed: int, capacity: int) -> int:
        """Drop the oldest exchanges (a user turn with the answer to it) until `positions_needed`
        more positions fit; the system turn stays. Returns how many turns were dropped."""
        dropped = 0
        first = 1 if self.turns and self.turns[0].role == "system" else 0
        while self.positions + positions_needed > capacity and len(self.turns) > first:
            del self.turns[first]
            dropped += 1
            if len(self.turns) > first and self.turns[first].role == "assistant":
                del self.turns[first]
                dropped += 1
        return dropped
