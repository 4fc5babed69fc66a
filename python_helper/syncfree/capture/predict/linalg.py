"""What ``matrix_exp`` syncs on CUDA, from its matrices' values: the call's handler (handlers.py) and the backward
formula's node (autograd.py, which runs ``matrix_exp`` of a block matrix) count it alike."""

from __future__ import annotations

#: mexp_impl's Taylor-degree thresholds on the 1-norm (aten/src/ATen/native/LinearAlgebra.cpp,
#: thetas_float / thetas_double); the norms above the fifth take the scaling-and-squaring
#: path (compute_T18_scale_square).
_MATRIX_EXP_THETAS = {
    "float": (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
              5.800524627688768e-01, 1.461661507209034e+00),
    "double": (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
               4.991228871115323e-02, 2.996158913811580e-01),
}
#: The coefficient tensors each degree's compute_T<n> copies from the host (degrees 1, 2,
#: 4, 8, 12): compute_T4 two, compute_T8 four, compute_T12 one matrix (LinearAlgebra.cpp).
_MATRIX_EXP_COEFFICIENT_COPIES = (0, 0, 2, 4, 1)


def matrix_exp_syncs(args: tuple, kwargs: dict) -> int:
    """The syncs of ``matrix_exp`` on CUDA, from the matrices' 1-norms (which the CPU
    computes from the same values). aten/src/ATen/native/LinearAlgebra.cpp, mexp_impl: a
    batch of several matrices goes straight to compute_T18_scale_square, whose
    unique_consecutive and section sizes read back make 3 (measured: OpInfo's 5 x 5 x 5
    sample, H100). One matrix: its norm copied to the host (1), the index of its norm
    interval copied back to the device (1) with the coefficients of that interval's
    Taylor degree (0, 0, 2, 4, 1 for degrees 1, 2, 4, 8, 12; a 5 x 5 matrix of norm 0.05:
    4 on the H100), and past the last interval the scaling path (3) plus index_put_ with
    that host index (1): 6 (measured: OpInfo's 5 x 5 sample, norm 27.5). Sizes 0 and 1 (clone, exp) and an empty batch: 0."""
    import torch

    a = args[0] if args else kwargs.get("input", kwargs.get("A"))
    if not isinstance(a, torch.Tensor) or a.dim() < 2 or a.size(-1) < 2:
        return 0
    batch = a.numel() // (a.size(-1) * a.size(-2))
    if batch == 0:
        return 0
    if batch > 1:
        return 3
    double = a.dtype in (torch.float64, torch.complex128)
    norm = float(a.detach().abs().sum(-2).amax(-1).reshape(-1)[0])
    return matrix_exp_syncs_of_norm(norm, double, 1)


def matrix_exp_syncs_of_norm(norm: float, double: bool, batch: int) -> int:
    """`matrix_exp_syncs` of a matrix of 1-norm ``norm`` (``batch`` matrices: 3, whatever their norms)."""
    if batch == 0:
        return 0
    if batch > 1:
        return 3
    thetas = _MATRIX_EXP_THETAS["double" if double else "float"]
    large = thetas[-1]
    syncs = 1  # norm.to(kCPU)
    lower = -1.0
    for theta, copies in zip(thetas, _MATRIX_EXP_COEFFICIENT_COPIES):
        if lower < norm <= theta:  # this interval's Taylor degree (NaN is in none)
            # the interval's index copied to the device, and compute_T<degree>'s coefficients
            # (_blob_to_Tensor: a host array copied to the device, blocking)
            syncs += 1 + copies
        lower = theta
    if norm >= large:
        syncs += 5
    return syncs
