"""The tiny checkpoint loads through liquid-audio's own from_pretrained paths, on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.model.loading import load_model
from engine.model.tiny_checkpoint import AUDIO_START_ID, IM_END_ID, IM_START_ID, TEXT_END_ID, write_tiny_checkpoint


def test_loaded_through_liquid_audio_on_cpu(tiny_loaded) -> None:
    from liquid_audio import LFM2AudioModel, LFM2AudioProcessor
    from liquid_audio.detokenizer import LFM2AudioDetokenizer

    assert isinstance(tiny_loaded.model, LFM2AudioModel)
    assert isinstance(tiny_loaded.processor, LFM2AudioProcessor)
    assert tiny_loaded.device == torch.device("cpu")
    assert tiny_loaded.dtype == torch.float32
    assert next(tiny_loaded.model.parameters()).dtype == torch.float32
    detokenizer = tiny_loaded.processor.audio_detokenizer
    assert isinstance(detokenizer, LFM2AudioDetokenizer)
    assert next(detokenizer.parameters()).device.type == "cpu"
    # The tied codebook heads survived loading (one tensor, two names).
    head = tiny_loaded.model.depth_embeddings[0]
    assert head.to_logits.weight.data_ptr() == head.embedding.weight.data_ptr()


def test_weights_equal_the_files(tiny_loaded, tiny_model_dir: Path) -> None:
    from safetensors.torch import load_file

    stored = load_file(str(tiny_model_dir / "model.safetensors"))
    params = dict(tiny_loaded.model.state_dict())
    for name in ("lfm.layers.1.self_attn.q_proj.weight", "depthformer.layers.0.operator.qkv_proj.weight", "audio_adapter.model.1.weight"):
        assert torch.equal(params[name], stored[name])


def test_tokenizer_special_ids(tiny_loaded) -> None:
    tokenizer = tiny_loaded.processor.text
    ids = tokenizer.convert_tokens_to_ids(["<|startoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|text_end|>"])
    assert ids == [1, IM_START_ID, IM_END_ID, AUDIO_START_ID, TEXT_END_ID] == [1, 6, 7, 128, 130]
    encoded = tokenizer.encode("<|im_start|>user\nこんにちは<|im_end|>\n", add_special_tokens=False)
    assert encoded[0] == 6 and IM_END_ID in encoded
    assert tokenizer.decode(tokenizer.encode("ずんだもんなのだ", add_special_tokens=False)) == "ずんだもんなのだ"


def test_schedule_is_read_from_config(tmp_path: Path) -> None:
    folder = write_tiny_checkpoint(tmp_path / "m", interleaved_n_text=2, interleaved_n_audio=3)
    assert json.loads((folder / "config.json").read_text())["interleaved_n_audio"] == 3
    loaded = load_model(folder, device="cpu")
    assert (loaded.interleaved_n_text, loaded.interleaved_n_audio) == (2, 3)
