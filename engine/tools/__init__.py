"""Command-line tools that run without the window: `voicechat reply` (reply), `voicechat --selftest` (selftest)
and the system report it writes (diagnostics)."""
