"""The real-time engine: the backbone's steps over one static cache (static_model) and the depthformer's frame
(static_depthformer), over the weights as static_weights lays them out (fused, never copied), captured
once as CUDA graphs (backend; graphs is the one way a graph is captured), the take's way to its backbone
rows as graphs over a ladder of take lengths (encoder_graphs), sampling inside the graphs (sampling), the
streaming audio decoder (streaming_decoder; streaming is the one reset / snapshot / restore protocol), and
the engine's own CUDA kernels (kernels/: one .cu file and one small wrapper per kernel family, compiled by
NVRTC at start-up and cached on disk)."""
