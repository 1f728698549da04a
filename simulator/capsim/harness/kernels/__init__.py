"""The harness's attention kernels: a torch reference, FlexAttention, and Triton (its source kept
apart so that the interpreter can run it on a CPU), plus the whole-forward-pass attention backends.
torch and triton are imported only inside the functions that need them."""
