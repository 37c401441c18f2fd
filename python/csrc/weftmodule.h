/* weftmodule.h - what the parts of the extension module weft._weft share: the Fabric and Tensor objects,
 * argument parsing, errors, and the array operands. weftmodule.c holds the module, fabric.c-style pieces are
 * split by topic: tensor.c (the Tensor type and its operators), dlpack.c (DLPack in and out), gpt.c (the GPT
 * model on numpy arrays). */
#ifndef WEFTMODULE_H
#define WEFTMODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL weft_ARRAY_API
#ifndef WEFT_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <pythread.h>

#include "weft.h"

/* Arrays of at least this many elements go to the library as wrapped memory (weft_tensor_wrap: no copy);
 * smaller ones are copied into a scratch tensor kept per shape, which costs less than making a tensor. */
#define WP_WRAP_MIN 16384

typedef struct {
  int used;
  int pos;
  int ndim;
  int64_t dims[WEFT_MAX_DIMS];
  weft_tensor *h;
  size_t bytes;
  uint64_t stamp;
} wp_scratch;

#define WP_SCRATCH_MAX 64

typedef struct {
  PyObject_HEAD
  weft_fabric *f; /* NULL once closed */
  PyThread_type_lock lock;
  unsigned long lock_owner; /* the thread holding lock (a dealloc inside a locked call locks again) */
  int lock_depth;
  PyObject *on_note;    /* the callable notes go to, or NULL */
  PyObject *lane_names; /* tuple of str, index order */
  PyObject *lane_index; /* dict str -> int */
  wp_scratch scratch[WP_SCRATCH_MAX];
  size_t scratch_bytes, scratch_budget;
  uint64_t stamp;
  Py_ssize_t copies; /* array operands copied for their layout or dtype */
  PyObject *weakreflist;
  PyObject *dict; /* a Python subclass's attributes */
} FabricObject;

typedef struct TensorObject {
  PyObject_HEAD
  FabricObject *fab;     /* strong reference */
  weft_tensor *h;        /* owned handle (NULL once closed, and always NULL for a view) */
  struct TensorObject *base; /* a view's tensor, which owns the handle; NULL for an owner */
  int ndim;              /* the shape Python sees: 0 (a scalar held as [1]) to 4 */
  int64_t dims[WEFT_MAX_DIMS];
  int trans;             /* a view with the last two axes of its base swapped */
  int contract;          /* the contract its operators run under */
  /* Host memory this tensor's handle wraps and Python can see (DLPack): while set, the memory is the
   * value whenever Python runs (ops reading it are told it may have changed; ops writing it bring the
   * value home before they return). */
  float *shared;
  int shared_owned;          /* shared was allocated here (freed at dealloc) */
  void *dl_managed;          /* the DLManagedTensor whose memory this wraps (deleter called at dealloc) */
  Py_ssize_t exports;        /* DLPack capsules handed out and not yet released */
  /* Device memory Python can see (DLPack with a cuda lane): the lane whose copy is the value whenever Python
   * runs (-1: none). Ops reading the tensor take that copy as current; ops writing it leave the value there
   * and wait for it. */
  int dev_lane;
  PyObject *weakreflist;
} TensorObject;

extern PyTypeObject WP_FabricType;
extern PyTypeObject WP_TensorType;
extern PyObject *wp_errors;     /* dict status -> exception class (set by weft/__init__.py) */
extern PyObject *wp_base_error; /* weft.WeftError */
extern PyObject *wp_dtype_f32, *wp_dtype_i32;

#define WP_IS_TENSOR(o) (Py_TYPE(o) == &WP_TensorType)

/* ---- locking: the library wants one thread at a time per fabric; the GIL is dropped while waiting */
static inline void wp_lock(FabricObject *fo) {
  unsigned long me = PyThread_get_thread_ident();
  if (fo->lock_depth && fo->lock_owner == me) {
    fo->lock_depth++;
    return;
  }
  if (!PyThread_acquire_lock(fo->lock, NOWAIT_LOCK)) {
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(fo->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
  }
  fo->lock_owner = me;
  fo->lock_depth = 1;
}
static inline void wp_unlock(FabricObject *fo) {
  if (--fo->lock_depth == 0) {
    fo->lock_owner = 0;
    PyThread_release_lock(fo->lock);
  }
}

/* ---- errors */
PyObject *wp_raise_status(weft_status st, const char *message);
PyObject *wp_raise_fabric(FabricObject *fo, weft_status st);
PyObject *wp_raise(weft_status st, const char *fmt, ...);
int wp_check_open(FabricObject *fo);
/* Makes the exception being raised name the Python call `fn` ("add: ...") when its message does not already:
 * weft's errors and the TypeError, ValueError, OverflowError and BufferError of argument checks. */
void wp_name_error(const char *fn);

/* Wrappers of the public methods: an error that leaves one names the call (wp_name_error). Only the failing path
 * pays for it. */
#define WP_NAMED_FAST(T, impl, fn)                                                                              \
  static PyObject *impl##_named(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {        \
    PyObject *r = impl((T *)self, args, nargs, kw);                                                             \
    if (!r) wp_name_error(fn);                                                                                  \
    return r;                                                                                                   \
  }
#define WP_NAMED_1(T, impl, fn) /* METH_NOARGS, METH_O, METH_VARARGS */                                          \
  static PyObject *impl##_named(PyObject *self, PyObject *arg) {                                                \
    PyObject *r = impl((T *)self, arg);                                                                         \
    if (!r) wp_name_error(fn);                                                                                  \
    return r;                                                                                                   \
  }
#define WP_NAMED_KW(T, impl, fn) /* METH_VARARGS | METH_KEYWORDS */                                              \
  static PyObject *impl##_named(PyObject *self, PyObject *args, PyObject *kw) {                                 \
    PyObject *r = impl((T *)self, args, kw);                                                                    \
    if (!r) wp_name_error(fn);                                                                                  \
    return r;                                                                                                   \
  }

/* ---- argument parsing: positional then keywords by name, borrowed references, NULL when not given */
int wp_parse(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
             PyObject **out, int nmax, int nrequired);

/* ---- options */
int wp_is_complex(PyObject *o); /* a complex number, numpy complex scalar or complex array */
/* A real number as float32: TypeError naming fn and name for anything else (complex included), OverflowError
 * for an int too large for a double. */
int wp_as_float(PyObject *o, const char *fn, const char *name, float *out);
int wp_contract(PyObject *o, int *out);
int wp_lane(FabricObject *fo, PyObject *o, int *out);
extern const char *const wp_contract_names[4];

/* ---- tensors */
TensorObject *wp_tensor_new(FabricObject *fo, weft_tensor *h, int ndim, const int64_t *dims, int contract);
weft_tensor *wp_tensor_handle(TensorObject *t); /* raises StateError and returns NULL if closed */
int wp_tensor_before_use(TensorObject *t);       /* shared memory: tell the library it may have changed */
int wp_tensor_after_write(TensorObject *t);      /* shared memory: bring the value home */
PyObject *wp_tensor_numpy(TensorObject *t, PyObject *out);
int wp_tensor_materialize(TensorObject *t, weft_tensor **out_h, TensorObject **out_tmp);

/* ---- ops the Tensor operators call */
PyObject *wp_matmul_impl(FabricObject *fo, PyObject *a, PyObject *b, int contract, int lane, int trans_a,
                         int trans_b, PyObject *out, int convert, int copy_ok, const char *fn, const char *na,
                         const char *nb, int ta_given, int tb_given);
enum { EW_ADD, EW_RELU, EW_RELU_BW, EW_SCALE, EW_SUM_ROWS };
PyObject *wp_ew_op(FabricObject *fo, int kind, const char *fn, PyObject *x, const char *nx, PyObject *y,
                   const char *ny, float alpha, int contract, int lane, PyObject *out, int convert);
/* convert: 1 converts other real dtypes to float32, 0 refuses them naming dtype=, -1 refuses them (operators) */
PyArrayObject *wp_as_f32(FabricObject *fo, PyObject *x, const char *fn, const char *name, int convert);
PyObject *wp_scale_tensor(TensorObject *t, double alpha, const char *op);

/* ---- DLPack */
PyObject *wp_tensor_dlpack(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *wp_tensor_dlpack_device(TensorObject *t, PyObject *unused);
PyObject *wp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
void wp_dlpack_release(void *managed);

/* ---- GPT */
extern PyTypeObject WP_GPTType;

/* ---- helpers */
PyObject *wp_shape_tuple(int ndim, const int64_t *dims);
const char *wp_fmt_shape(char *buf, size_t len, int ndim, const int64_t *dims);
weft_tensor *wp_scratch_get(FabricObject *fo, int pos, int ndim, const int64_t *dims);
void wp_scratch_trim(FabricObject *fo);

#endif
