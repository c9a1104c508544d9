// swiglu: silu(gate) * up as one elementwise kernel, compiled by PyTorch's jiterator (swiglu.py), which
// takes a template function like this one and makes the kernel around it; the loader drops these
// comment lines first (the jiterator parses the text from its `template`).
template <typename T> T swiglu(T gate, T up) { return gate / (T(1.0f) + exp(-gate)) * up; }
