"""The model: ERNIE backbone and task heads, CRF, ELECTRA, weight loading and the fused CPU kernels."""
