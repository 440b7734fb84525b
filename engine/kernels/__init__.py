"""The kernels: Triton kernels for the hot paths (a fused decoder layer, the fused draw of the code
predictor, the codec's snake activation), compiled pointwise pieces, programmatic dependent launch
and CUDA graph helpers, and `choice.Kernels`, the one value that says which of them an engine uses."""
