"""The conversation history: a SQLite store of every finished turn (store), its audio files (audio), the
bridge to the model's conversation for continuing (context), and the engine thread's side (service,
engine_commands)."""
