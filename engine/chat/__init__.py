"""The chat core: a session (one model, its voice, the conversation and its cache), the conversation laid out as
the backbone's positions, the interleaved decode loop, the decoding settings and the answer's audio decoding.

Kept empty on purpose: the real-time layer imports `engine.chat.decoding` (torch-free), and importing this
package must not load the rest of the core."""
