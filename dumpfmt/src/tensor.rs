//! A tensor read from a `.pt` or `.npy` file: dtype, shape and C-contiguous little-endian bytes.
//!
//! Agreed interface (the implementation lives in `npy.rs` / `pt.rs`):
//! * `TensorInfo { dtype, shape, nbytes }` — cheap header-only facts (`read_info(path)`).
//! * `Tensor { dtype, shape, data }` where `data` is either a memory map of the file (a plain
//!   C-contiguous `.npy` or `.pt` storage, zero copy) or an owned buffer (strided/offset `.pt`).
//!   `Tensor::bytes()` gives exactly `numel × dtype.size()` bytes in C order.
//! * `read_tensor(path)` dispatches on the extension; `write_npy` / `write_pt` write files that
//!   numpy / torch load with equal values.
