"""Audio for the engine: push-to-talk capture, streaming playback, devices, resampling and WAV files. numpy, soxr,
soundfile and sounddevice only: no Qt, no torch (the audio callbacks must stay lean and import nothing heavy).

Empty on purpose: reading or writing a WAV file (engine.audio.wav) must not load PortAudio."""
