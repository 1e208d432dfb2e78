//! The tensor interface every numprobe crate builds on: one [`DType`] naming every element type
//! msprobe's dumps carry (with its torch, MindSpore and numpy spellings) and one borrowed
//! [`TensorView`] (dtype, shape, bytes) that converts to and from `ndarray` views without
//! copying.
//!
//! * [`dtype`]: [`DType`] and its names.
//! * [`view`]: [`TensorView`], the typed-slice [`Elems`], the [`Element`] trait that ties a Rust
//!   type (`f32`, `half::bf16`, ...) to its dtype, and [`ViewError`].
//!
//! ```
//! use ndarray::array;
//! use numprobe_tensor::{DType, TensorView};
//!
//! let a = array![[1.0f32, 2.0], [3.0, 4.0]];
//! let v = TensorView::from_array(&a).unwrap();
//! assert_eq!((v.dtype(), v.shape()), (DType::F32, &[2, 2][..]));
//! assert_eq!(v.dtype().torch_name(), "torch.float32");
//! assert_eq!(v.to_ndarray::<f32>().unwrap(), a.view().into_dyn());
//! ```

pub mod dtype;
pub mod view;

pub use dtype::DType;
pub use view::{Element, Elems, TensorView, ViewError, checked_numel};

// The element types of the public API, so an embedder names the same versions.
pub use half::{bf16, f16};
pub use ndarray;
pub use num_complex::{Complex32, Complex64};
