// numprobe's optional reader of torch tensors through torch's C++ API.
//
// The native walk (capture/py/src/walk.rs) reads each tensor it records: layout, device,
// dtype, shape, strides, data address, the negative and conjugate bits, requires_grad and
// for the record cache the storage and version counter. Through Python's C API that is four
// to eight calls a tensor (0.3-0.6 us); here it is one (about 15 ns). torch's C++ ABI changes
// between releases, so this file is compiled on the user's machine against the torch that is
// installed (numprobe/pytorch/_torch_shim.py) and loaded only by that same torch: the string
// NUMPROBE_BUILT_FOR names it, and the loader compares it with the running torch's.
//
// Every function is noexcept at the C boundary: an exception becomes an error code, and the
// walk then reads the tensor through Python as it does without this library.

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/node.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <memory>

#ifndef NUMPROBE_BUILT_FOR
#error "NUMPROBE_BUILT_FOR must name the torch this file is built against"
#endif

// The layout of numprobe_tensor_meta and the functions' signatures; the Rust side refuses a
// library of another.
#define NUMPROBE_SHIM_ABI 4

namespace {

// A post hook on a gradient function that calls a Python callable as
// `hook(grad_inputs, grad_outputs)` (tuples, None for an undefined gradient) and leaves the
// gradients as they are: what `grad_fn.register_hook(hook)` does for a hook returning None,
// without torch's handle and hook dictionary made in Python for each registration.
class PythonPostHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit PythonPostHook(PyObject* fn) : fn_(fn) {
    Py_INCREF(fn_);
  }

  ~PythonPostHook() override {
    // The graph may be freed on any thread, and after the interpreter is gone.
    if (Py_IsInitialized()) {
      PyGILState_STATE gil = PyGILState_Ensure();
      Py_DECREF(fn_);
      PyGILState_Release(gil);
    }
  }

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& inputs) override {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* a = wrap(outputs);
    PyObject* b = a ? wrap(inputs) : nullptr;
    PyObject* res = b ? PyObject_CallFunctionObjArgs(fn_, a, b, nullptr) : nullptr;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (res == nullptr) {
      // The Python error is taken while the GIL is held, then raised by autograd as the
      // error of backward(), as torch's own Python hooks do.
      python_error err;
      err.persist();
      PyGILState_Release(gil);
      throw std::move(err);
    }
    Py_DECREF(res);
    PyGILState_Release(gil);
    return outputs;
  }

 private:
  static PyObject* wrap(const torch::autograd::variable_list& vars) {
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(vars.size()));
    if (t == nullptr) {
      return nullptr;
    }
    for (size_t i = 0; i < vars.size(); i++) {
      // None for an undefined gradient.
      PyObject* v = THPVariable_Wrap(vars[i]);
      if (v == nullptr) {
        Py_DECREF(t);
        return nullptr;
      }
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), v);
    }
    return t;
  }

  PyObject* fn_;
};

// `body(t)` for the tensor of `obj` (a THPVariable, checked by the caller): what it returns,
// or -1 for an undefined tensor or when torch throws, so that no exception crosses the C
// boundary (the caller then takes the Python path).
template <typename Body>
int with_tensor(PyObject* obj, Body&& body) noexcept {
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined()) {
      return -1;
    }
    return body(t);
  } catch (...) {
    return -1;
  }
}

}  // namespace

extern "C" {

// What the walk needs of one tensor. `sizes` and `strides` point into the tensor's own
// metadata: valid while the tensor lives and nothing changes its shape (the walk holds the
// tensor and runs no Python code meanwhile).
struct numprobe_tensor_meta {
  const int64_t* sizes;
  const int64_t* strides;
  int64_t ndim;
  // Address of the first element (the storage's data plus the offset); 0 without storage
  // data (no elements, or an unallocated storage).
  uint64_t data_ptr;
  // The StorageImpl, as `untyped_storage()._cdata` gives it; 0 without storage.
  uint64_t storage;
  // The storage's bytes: the walk reads only elements inside them (a storage resized to
  // nothing, as sharded training does to free a parameter, keeps its tensors' sizes).
  uint64_t storage_data;
  uint64_t storage_nbytes;
  // The version counter (`_version`); -1 for an inference tensor, which has none.
  int64_t version;
  // c10::ScalarType's value; its torch dtype is learnt at load by the Rust side.
  int32_t scalar_type;
  uint8_t strided;
  uint8_t cpu;
  uint8_t neg;
  uint8_t conj;
  uint8_t requires_grad;
  // is_contiguous() for the default memory format (strided tensors only).
  uint8_t contiguous;
};

__attribute__((visibility("default"))) uint32_t numprobe_shim_abi() noexcept {
  return NUMPROBE_SHIM_ABI;
}

__attribute__((visibility("default"))) const char* numprobe_shim_built_for() noexcept {
  return NUMPROBE_BUILT_FOR;
}

__attribute__((visibility("default"))) uint32_t numprobe_shim_meta_size() noexcept {
  return sizeof(numprobe_tensor_meta);
}

// Fills `out` for `obj`, which the caller has checked is exactly a torch.Tensor or
// torch.nn.Parameter (a THPVariable). Returns 0, or -1 when torch refused a read (the caller
// then takes the Python path). The GIL is held by the caller.
__attribute__((visibility("default"))) int numprobe_tensor_meta_of(
    PyObject* obj,
    numprobe_tensor_meta* out) noexcept {
  return with_tensor(obj, [out](const at::Tensor& t) {
    *out = numprobe_tensor_meta{};
    out->scalar_type = static_cast<int32_t>(t.scalar_type());
    out->strided = t.layout() == c10::kStrided;
    out->cpu = t.device().is_cpu();
    out->neg = t.is_neg();
    out->conj = t.is_conj();
    out->requires_grad = t.requires_grad();
    out->version = t.is_inference() ? -1 : static_cast<int64_t>(t._version());
    if (!out->strided) {
      return 0;
    }
    // Subclasses of TensorImpl with custom sizes (nested, symbolic) throw here: the walk
    // then takes the Python path.
    c10::IntArrayRef sizes = t.sizes();
    c10::IntArrayRef strides = t.strides();
    out->sizes = sizes.data();
    out->strides = strides.data();
    out->ndim = static_cast<int64_t>(sizes.size());
    out->contiguous = t.is_contiguous();
    if (t.has_storage()) {
      const c10::Storage& s = t.storage();
      out->storage = reinterpret_cast<uint64_t>(s.unsafeGetStorageImpl());
      out->storage_data = reinterpret_cast<uint64_t>(s.data());
      out->storage_nbytes = static_cast<uint64_t>(s.nbytes());
      // const_data_ptr: no copy-on-write materialisation; only the elements are read.
      if (t.numel() > 0 && out->storage_data != 0) {
        out->data_ptr = reinterpret_cast<uint64_t>(t.const_data_ptr());
      }
    }
    return 0;
  });
}

// Adds `hook` (a Python callable) as a post hook of the gradient function of `obj` (a
// THPVariable, checked by the caller). Returns 0, 1 when the tensor has no gradient function,
// or -1 when torch refused (the caller then registers the hook through Python). The GIL is
// held by the caller.
__attribute__((visibility("default"))) int numprobe_add_post_hook(
    PyObject* obj,
    PyObject* hook) noexcept {
  return with_tensor(obj, [hook](const at::Tensor& t) {
    // A reference to the tensor's own pointer (shared_ptr or intrusive_ptr by torch release).
    const auto& fn = t.grad_fn();
    if (!fn) {
      return 1;
    }
    fn->add_post_hook(std::make_unique<PythonPostHook>(hook));
    return 0;
  });
}

// Calls `fn(ctx, begin, end)` for each chunk of [0, n) as at::parallel_for cuts it with
// `grain`, on the thread torch runs that chunk on, and returns when all have returned: the
// statistics read each chunk of a large tensor on the core whose cache torch's elementwise
// operators (cut the same way) left it in. `fn` never throws. Returns 0, or -1 when torch
// threw (some chunks may not have been called: the caller reads those itself).
__attribute__((visibility("default"))) int numprobe_parallel_for(
    int64_t n,
    int64_t grain,
    void (*fn)(void*, int64_t, int64_t),
    void* ctx) noexcept {
  try {
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { fn(ctx, begin, end); });
    return 0;
  } catch (...) {
    return -1;
  }
}

// torch's own float32 Mean and Norm of `obj` (a THPVariable, checked by the caller): what
// `torch.mean(t)` and `torch.linalg.vector_norm(t)` (torch.norm's path for a whole tensor)
// give, as doubles, the values msprobe records. For the tensors whose reduction order
// numprobe's own pass does not follow: under 8 elements, and strided views whose order is set
// by their strides. No gradient graph is made. Returns 0, or -1 when torch threw (the caller
// then takes the Python path). The GIL is held by the caller.
__attribute__((visibility("default"))) int numprobe_mean_norm(
    PyObject* obj,
    double* mean,
    double* norm) noexcept {
  return with_tensor(obj, [mean, norm](const at::Tensor& t) {
    at::NoGradGuard no_grad;
    double m = at::mean(t).item<double>();
    double n = at::linalg_vector_norm(t, 2).item<double>();
    *mean = m;
    *norm = n;
    return 0;
  });
}

// torch.is_grad_enabled() of this thread.
__attribute__((visibility("default"))) int numprobe_grad_enabled() noexcept {
  return at::GradMode::is_enabled() ? 1 : 0;
}

}  // extern "C"
