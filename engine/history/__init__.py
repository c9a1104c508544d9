"""The conversation history: a SQLite store of every finished turn (store), its audio files (audio), the
bridge to the model's conversation for continuing (context), the record of one turn that the engine thread
keeps and the history saves and restores (turn_record: the history's value type, so that the history never
imports the engine thread), and the engine thread's side (service, engine_commands)."""
