"""The audio detokenizer in the int8 precision (its transformer in bf16; engine/model/loading.py
`detokenizer_dtype`), on the tiny random checkpoint in the Hub layout, on the CPU: what loading makes in each
precision, the streaming decoder's bf16 path over it, the int8 check's comparison of the decoders (a broken bf16
decoder refuses int8, with its own message), the kept verdicts made before that comparison, and the benchmark's
int8 copy and its decoder bytes."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.chat.precision_check import THRESHOLDS, decoder_passes, snr_db, streams_pass
from engine.model.checkpoint import CheckpointTensors
from engine.model.loading import DETOKENIZER_FLOAT32, UNUSED_TOKEN_TABLE, load_model
from engine.realtime.streaming_decoder import FRAME_SAMPLES, StreamingDetokenizer

torch.set_num_threads(1)


def _session(folder: Path, precision: str):
    """ChatSession over the real-time engine, run eagerly (ChatSession.open's CPU path is the eager one)."""
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.chat.session import ChatSession
    from engine.realtime.backend import GraphedBackend

    loaded = load_model(folder, device="cpu", precision=precision)
    return ChatSession(loaded, GraphedBackend(loaded, context_tokens=160, capture=False), make_audio_decoder(loaded, use_cuda_graphs=False),
                       context_tokens=160, fallback_reason="test", graphs_ready=False, model_id=None)


def _codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (8, frames), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_the_detokenizer_loads_with_a_bf16_transformer_in_int8_and_float32_in_bf16(tiny_model_dir: Path, tiny_loaded, monkeypatch) -> None:
    filled: dict[str, tuple[torch.dtype, int]] = {}
    original = CheckpointTensors.read_into

    def spy(self, name, target, *planned):  # noqa: ANN001
        if self.path.parent.name == "audio_detokenizer":
            filled[name] = (target.dtype, target.data_ptr())
        return original(self, name, target, *planned)

    monkeypatch.setattr(CheckpointTensors, "read_into", spy)
    int8 = load_model(tiny_model_dir, device="cpu", precision="int8").processor.audio_detokenizer
    float32 = tiny_loaded.processor.audio_detokenizer  # "bf16": liquid-audio's float32 detokenizer, as before
    assert all(p.dtype == torch.float32 for p in float32.parameters()) and not float32.lin._forward_pre_hooks

    theirs = dict(float32.named_parameters())
    for name, param in int8.named_parameters():
        if name == UNUSED_TOKEN_TABLE:
            assert param.numel() == 0
            continue
        if name.startswith(DETOKENIZER_FLOAT32):  # the output Linear
            assert param.dtype == torch.float32 and torch.equal(param, theirs[name]), name
        else:  # the transformer: the checkpoint's values rounded once to bf16, filled straight into their storage
            assert param.dtype == torch.bfloat16 and torch.equal(param, theirs[name].to(torch.bfloat16)), name
            assert filled[name] == (torch.bfloat16, param.data_ptr()), name
    for name, buffer in int8.named_buffers():  # the ISTFT window and the rotary frequencies stay float32
        assert buffer.dtype == torch.float32 and torch.equal(buffer, dict(float32.named_buffers())[name]), name

    # The streaming decoder runs its bf16 path: the transformer in bf16, the head and the ISTFT in float32.
    decoder = StreamingDetokenizer(int8)
    assert decoder.dtype == torch.bfloat16 and decoder._arena.dtype == torch.bfloat16
    assert decoder._lin_w.dtype == decoder._dft.dtype == decoder.pcm_buffer.dtype == torch.float32
    assert torch.equal(decoder._lin_w, StreamingDetokenizer(float32)._lin_w)
    codes = _codes(12, seed=1)
    streamed = torch.cat([*(decoder.step(codes[:, i]).clone() for i in range(12)), decoder.flush()])
    # liquid-audio's whole-utterance forward runs on the bf16 module too (its head takes its input in float32).
    whole = tiny_loaded.processor.decode(codes[None])[0]
    assert snr_db(whole, int8(codes[None])[0]) > THRESHOLDS.min_decoder_snr_db
    assert snr_db(whole, streamed) > THRESHOLDS.min_decoder_snr_db
    assert torch.equal(tiny_loaded.processor.decode(codes[None])[0], whole)  # float32 unchanged


def test_the_int8_check_compares_the_decoders_and_a_broken_bf16_decoder_refuses_int8(tiny_model_dir: Path) -> None:
    from engine.worker.precision import _refusal

    bf16, int8 = _session(tiny_model_dir, "bf16"), _session(tiny_model_dir, "int8")
    reference = bf16.record_check_reference()
    frames = len(reference.audio_frames)
    assert frames == 2 * 9 and reference.pcm is not None and reference.pcm.shape == (frames * FRAME_SAMPLES,)
    assert reference.pcm.pow(2).mean().sqrt() > 1e-3  # audio, not silence

    report = int8.compare_with_check_reference(reference)
    assert report.decoder is not None and report.decoder.frames == frames
    print(f"tiny detokenizer, bf16 transformer against float32: SNR {report.decoder.snr_db:.1f} dB")
    assert report.decoder.snr_db > THRESHOLDS.min_decoder_snr_db + 10
    assert report.passed and streams_pass(report.as_dict()["streams"], report.thresholds)
    kept = json.loads(json.dumps(report.as_dict(), allow_nan=False))  # plain JSON, as the verdicts file keeps it
    assert kept["decoder"] == {"frames": frames, "snr_db": report.decoder.snr_db}
    assert kept["thresholds"]["min_decoder_snr_db"] == THRESHOLDS.min_decoder_snr_db
    assert bf16.compare_with_check_reference(reference).decoder.snr_db == 300.0  # the same decoder: identical PCM

    # A broken bf16 decoder: the transformer's matrices 30 % off. The logits are the same; the decoder fails.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in int8.loaded.processor.audio_detokenizer.named_parameters():
            if name.startswith("lfm.layers.") and param.dim() == 2:
                param.add_(0.3 * param.float().std() * torch.randn(param.shape, generator=generator).to(param.dtype))
    int8.decoder.decoder.refresh_weights()
    broken = int8.compare_with_check_reference(reference)
    print(f"broken: SNR {broken.decoder.snr_db:.1f} dB")
    assert broken.decoder.snr_db < THRESHOLDS.min_decoder_snr_db and not broken.passed
    assert {k: vars(v) for k, v in broken.streams.items()} == {k: vars(v) for k, v in report.streams.items()}
    refusal = _refusal(json.loads(json.dumps(broken.as_dict())))
    assert "audio decoder" in refusal.template and refusal.template.endswith("Standard precision (bf16) stays.")
    assert f"SNR {broken.decoder.snr_db:.1f} dB over 18 frames" in refusal.message and "from 20 dB" in refusal.message
    # Where the logits fail too, their figures are what is said.
    both = broken.as_dict()
    both["streams"]["codebook_0"]["kl_mean"] = 0.5
    assert "KL 0.500" in _refusal(both).message and "audio decoder" not in _refusal(both).template


def test_a_mimi_folder_has_no_decoder_figure_and_passes_on_its_logits() -> None:
    from engine.chat.precision_check import DecoderAgreement, PrecisionReport, StreamAgreement

    stream = StreamAgreement(steps=4, top1=1.0, top_k_overlap=1.0, kl_mean=0.01, kl_max=0.02)
    report = PrecisionReport(streams={"text": stream}, passed=True)
    assert report.as_dict()["decoder"] is None and decoder_passes(None, report.thresholds)
    assert not decoder_passes(vars(DecoderAgreement(frames=18, snr_db=19.9)), {})  # the default threshold applies


def test_verdicts_kept_before_the_decoders_were_compared_are_checked_again(tiny_model_dir: Path, tmp_path: Path) -> None:
    from engine.model.precision_verdicts import load_verdict, store_verdict

    verdicts = tmp_path / "verdicts.json"
    streams = {"text": {"steps": 12, "top1": 1.0, "top_k_overlap": 1.0, "kl_mean": 0.004, "kl_max": 0.01}}
    old = {"passed": True, "thresholds": {"text_top1": 0.8, "max_kl": 0.1}, "streams": streams}
    for passed in (True, False):  # measured on a float32 decoder: whatever it said, it says nothing of int8's now
        store_verdict(tiny_model_dir, "GPU", {**old, "passed": passed}, verdicts)
        assert load_verdict(tiny_model_dir, "GPU", verdicts) is None
    # The check's new verdict replaces it and is kept: the check runs once.
    new = {**old, "thresholds": {**old["thresholds"], "min_decoder_snr_db": 20.0}, "decoder": {"frames": 18, "snr_db": 41.0}}
    store_verdict(tiny_model_dir, "GPU", new, verdicts)
    assert load_verdict(tiny_model_dir, "GPU", verdicts)["decoder"] == {"frames": 18, "snr_db": 41.0}
    store_verdict(tiny_model_dir, "GPU", {**new, "decoder": None}, verdicts)  # a Mimi folder: nothing to compare
    assert load_verdict(tiny_model_dir, "GPU", verdicts)["decoder"] is None


def test_the_bench_int8_copy_decodes_with_the_int8_detokenizer_and_counts_its_bytes(tiny_loaded) -> None:
    from engine.bench.report import _int8_lines
    from engine.bench.run import _int8_copy
    from engine.bench.workload import stage_bytes
    from engine.chat.audio_decoding import GROUP_FRAMES

    int8 = _int8_copy(tiny_loaded)
    detokenizer, float32 = int8.processor.audio_detokenizer, tiny_loaded.processor.audio_detokenizer
    assert detokenizer is not float32 and tiny_loaded.processor._audio_detokenizer is float32  # the bf16 side is untouched
    assert detokenizer.lfm.layers[0].feed_forward.w1.weight.dtype == torch.bfloat16
    assert float32.lfm.layers[0].feed_forward.w1.weight.dtype == torch.float32
    # The decoder frame's bytes are the weights the int8 mode holds: the transformer at 2 bytes, the head at 4, read
    # once per step of a group of 8 frames.
    transformer = sum(p.numel() for name, p in float32.named_parameters() if name.startswith(("lfm.layers.", "lfm.embedding_norm.")))
    head = sum(p.numel() for p in float32.lin.parameters())
    assert GROUP_FRAMES[-1] == 8
    assert stage_bytes(tiny_loaded)["decoder_frame"] == 4 * (transformer + head) // 8
    assert stage_bytes(int8)["decoder_frame"] == (2 * transformer + 4 * head) // 8
    assert stage_bytes(int8)["decoder_step"] == 2 * transformer + 4 * head
    lines = _int8_lines({"bytes_per_audio_frame": 1, "weights_on_gpu_bytes": 1, "agreement_with_bf16": {
        "passed": True, "thresholds": {"min_decoder_snr_db": 20.0}, "streams": {}, "decoder": {"frames": 18, "snr_db": 41.04}}}, {})
    assert "SNR 41.0 dB over 18 frames (threshold 20 dB)" in "\n".join(lines)


def test_the_memory_estimate_counts_the_detokenizer_as_each_precision_loads_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The detokenizer's part of `model_need` is what the loaded detokenizer holds of its checkpoint's tensors: all
    of it float32 in bf16, the transformer at half that in int8."""
    import shutil

    from engine.model.checkpoint import read_safetensors_header
    from engine.model.memory import model_need

    without = tmp_path / "no-detokenizer"  # the same model less its detokenizer: the difference is the detokenizer's
    without.mkdir()
    shutil.copyfile(tiny_model_dir / "model.safetensors", without / "model.safetensors")
    header = read_safetensors_header(tiny_model_dir / "audio_detokenizer" / "model.safetensors")[1]
    held, counted = {}, {}
    for precision in ("bf16", "int8"):
        state = load_model(tiny_model_dir, device="cpu", precision=precision).processor.audio_detokenizer.state_dict()
        held[precision] = sum(state[name].nbytes for name in header if name != UNUSED_TOKEN_TABLE)
        need, need_without = (model_need(folder, context_tokens=4096, precision=precision) for folder in (tiny_model_dir, without))
        counted[precision] = need.weights - need_without.weights
    assert counted == held
    transformer = sum(state[name].numel() for name in header if name.startswith(("emb.", "lfm.")) and name != UNUSED_TOKEN_TABLE)
    assert held["bf16"] - held["int8"] == 2 * transformer > 0.9 * held["bf16"] / 2
