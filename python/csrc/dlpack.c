/* dlpack.c - DLPack in and out (the unversioned "dltensor" capsule that numpy >= 1.22 and PyTorch speak):
 * a Tensor's host memory handed to numpy or PyTorch without a copy, and their memory wrapped as a Tensor
 * (weft_tensor_wrap) without a copy. The structures are DLPack's own (dlpack.h, v0.8 ABI). */
#include <stdlib.h>
#include <string.h>

#include "weftmodule.h"

typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
enum { kDLFloat = 2 };

/* ------------------------------------------------------------------------------------------------ out */

typedef struct {
  DLManagedTensor m;
  int64_t shape[WEFT_MAX_DIMS];
  int64_t strides[WEFT_MAX_DIMS];
} export_block;

static void export_deleter(DLManagedTensor *m) {
  PyGILState_STATE g = PyGILState_Ensure();
  Py_XDECREF((PyObject *)m->manager_ctx);
  PyGILState_Release(g);
  free(m);
}

static void capsule_destructor(PyObject *cap) {
  /* consumed capsules are renamed "used_dltensor" and belong to their consumer */
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (m && m->deleter) m->deleter(m);
}

/* Makes the owner's host memory Python-visible: the value is read home into memory of our own, which
 * a new handle wraps (the old one goes). The caller holds the fabric lock. */
static int share(TensorObject *o) {
  if (o->shared) return 0;
  weft_tensor *h = wp_tensor_handle(o);
  if (!h) return -1;
  FabricObject *fo = o->fab;
  int nd;
  int64_t d[WEFT_MAX_DIMS];
  weft_tensor_shape(h, &nd, d);
  size_t n = weft_tensor_numel(h);
  size_t bytes = ((n ? n : 1) * 4 + 63) & ~(size_t)63;
  float *buf = aligned_alloc(64, bytes);
  if (!buf) return PyErr_NoMemory(), -1;
  weft_status st;
  weft_tensor *w = NULL;
  Py_BEGIN_ALLOW_THREADS st = weft_tensor_read(h, buf, n);
  if (!st) st = weft_tensor_wrap(fo->f, nd, d, buf, &w);
  Py_END_ALLOW_THREADS
  if (st) {
    free(buf);
    return wp_raise_fabric(fo, st), -1;
  }
  weft_tensor_destroy(h);
  o->h = w;
  o->shared = buf;
  o->shared_owned = 1;
  return 0;
}

PyObject *wp_tensor_dlpack(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"stream", "max_version", "dl_device", "copy"};
  PyObject *v[4];
  if (wp_parse("__dlpack__", args, nargs, kwnames, names, v, 4, 0)) return NULL;
  if (v[2] && v[2] != Py_None) {
    int type = -1, id = -1;
    if (!PyArg_ParseTuple(v[2], "ii", &type, &id)) return NULL;
    if (type != kDLCPU)
      return PyErr_Format(PyExc_BufferError, "__dlpack__: weft hands out host (CPU) memory; dl_device=(%d, %d) asked "
                          "for another device", type, id);
  }
  if (v[3] == Py_True)
    return PyErr_Format(PyExc_BufferError, "__dlpack__: copy=True: take numpy.asarray(t) for a copy; DLPack here "
                        "shares the tensor's memory");
  TensorObject *o = t->base ? t->base : t;
  FabricObject *fo = t->fab;
  wp_lock(fo);
  int rc = share(o);
  wp_unlock(fo);
  if (rc) return NULL;
  export_block *b = calloc(1, sizeof *b);
  if (!b) return PyErr_NoMemory();
  DLTensor *dl = &b->m.dl_tensor;
  dl->data = o->shared;
  dl->device.device_type = kDLCPU;
  dl->device.device_id = 0;
  dl->ndim = t->ndim;
  dl->dtype.code = kDLFloat, dl->dtype.bits = 32, dl->dtype.lanes = 1;
  /* the owner's row-major strides, in elements; a .T view swaps the last two */
  int64_t st[WEFT_MAX_DIMS];
  int64_t acc = 1;
  for (int i = o->ndim - 1; i >= 0; i--) st[i] = acc, acc *= o->dims[i];
  for (int i = 0; i < t->ndim; i++) b->shape[i] = t->dims[i], b->strides[i] = st[i];
  if (t->trans) {
    b->strides[t->ndim - 1] = st[t->ndim - 2];
    b->strides[t->ndim - 2] = st[t->ndim - 1];
  }
  dl->shape = b->shape;
  dl->strides = b->strides;
  dl->byte_offset = 0;
  Py_INCREF(t);
  b->m.manager_ctx = t;
  b->m.deleter = export_deleter;
  PyObject *cap = PyCapsule_New(&b->m, "dltensor", capsule_destructor);
  if (!cap) {
    Py_DECREF(t);
    free(b);
  }
  return cap;
}

PyObject *wp_tensor_dlpack_device(TensorObject *t, PyObject *unused) {
  (void)t, (void)unused;
  return Py_BuildValue("(ii)", kDLCPU, 0);
}

void wp_dlpack_release(void *managed) {
  DLManagedTensor *m = managed;
  if (m && m->deleter) m->deleter(m);
}

/* -------------------------------------------------------------------------------------------------- in */

PyObject *wp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  FabricObject *fo = (FabricObject *)self;
  static const char *const names[] = {"x", "contract"};
  PyObject *v[2];
  int contract;
  if (wp_parse("from_dlpack", args, nargs, kwnames, names, v, 2, 1) || wp_contract(v[1], &contract)) return NULL;
  PyObject *x = v[0];
  if (WP_IS_TENSOR(x)) return Py_NewRef(x);
  PyObject *dev = PyObject_CallMethod(x, "__dlpack_device__", NULL);
  if (!dev) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return PyErr_Format(PyExc_TypeError, "from_dlpack: %s has no __dlpack__ (numpy arrays and PyTorch tensors do)",
                          Py_TYPE(x)->tp_name);
    }
    return NULL;
  }
  int dtype = 0, did = 0;
  if (!PyArg_ParseTuple(dev, "ii", &dtype, &did)) {
    Py_DECREF(dev);
    return NULL;
  }
  Py_DECREF(dev);
  if (dtype != kDLCPU && dtype != kDLCUDAHost)
    return PyErr_Format(PyExc_BufferError, "from_dlpack: the memory is on DLPack device type %d (%s); weft takes host "
                        "memory (device type 1) through DLPack in this build", dtype,
                        dtype == kDLCUDA ? "CUDA" : "not the CPU");
  PyObject *cap = PyObject_CallMethod(x, "__dlpack__", NULL);
  if (!cap) return NULL;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) {
    Py_DECREF(cap);
    return NULL;
  }
  DLTensor *dl = &m->dl_tensor;
  char sb[160];
  PyObject *ret = NULL;
  int nd = dl->ndim;
  if (dl->dtype.code != kDLFloat || dl->dtype.bits != 32 || dl->dtype.lanes != 1) {
    PyErr_Format(PyExc_TypeError, "from_dlpack: the memory holds DLPack dtype (code %d, %d bits); weft shares float32 "
                 "only (convert it first, which copies)", dl->dtype.code, dl->dtype.bits);
    goto done;
  }
  if (nd < 0 || nd > WEFT_MAX_DIMS) {
    wp_raise(WEFT_ERR_SHAPE, "from_dlpack: %d dimensions; a weft tensor has at most %d", nd, WEFT_MAX_DIMS);
    goto done;
  }
  int64_t d[WEFT_MAX_DIMS], n = 1;
  for (int i = 0; i < nd; i++) d[i] = dl->shape[i], n *= d[i];
  if (n == 0) {
    wp_raise(WEFT_ERR_SHAPE, "from_dlpack: the array %s is empty; a weft tensor holds at least one element",
             wp_fmt_shape(sb, sizeof sb, nd, d));
    goto done;
  }
  /* row-major, or (a matrix's transpose) the last two axes swapped */
  int trans = 0;
  if (dl->strides) {
    int64_t acc = 1;
    int c_ok = 1;
    for (int i = nd - 1; i >= 0; i--) {
      if (d[i] != 1 && dl->strides[i] != acc) c_ok = 0;
      acc *= d[i];
    }
    if (!c_ok && nd >= 2) {
      int64_t s2[WEFT_MAX_DIMS], d2[WEFT_MAX_DIMS];
      memcpy(s2, dl->strides, (size_t)nd * sizeof *s2), memcpy(d2, d, (size_t)nd * sizeof *d2);
      int64_t t = s2[nd - 1]; s2[nd - 1] = s2[nd - 2]; s2[nd - 2] = t;
      t = d2[nd - 1]; d2[nd - 1] = d2[nd - 2]; d2[nd - 2] = t;
      acc = 1;
      trans = 1;
      for (int i = nd - 1; i >= 0; i--) {
        if (d2[i] != 1 && s2[i] != acc) trans = 0;
        acc *= d2[i];
      }
    }
    if (!c_ok && !trans) {
      PyErr_Format(PyExc_BufferError, "from_dlpack: the memory of shape %s is strided; weft shares row-major memory "
                   "(or a matrix's transpose): make it contiguous first, which copies", wp_fmt_shape(sb, sizeof sb, nd, d));
      goto done;
    }
  }
  float *data = (float *)((char *)dl->data + dl->byte_offset);
  int hnd = nd ? nd : 1;
  int64_t hd[WEFT_MAX_DIMS] = {1, 1, 1, 1};
  for (int i = 0; i < nd; i++) hd[i] = d[i];
  if (trans) {
    int64_t t = hd[nd - 1];
    hd[nd - 1] = hd[nd - 2], hd[nd - 2] = t;
  }
  wp_lock(fo);
  if (wp_check_open(fo)) {
    wp_unlock(fo);
    goto done;
  }
  weft_tensor *h = NULL;
  weft_status st = weft_tensor_wrap(fo->f, hnd, hd, data, &h);
  wp_unlock(fo);
  if (st) {
    wp_raise_fabric(fo, st);
    goto done;
  }
  TensorObject *t = wp_tensor_new(fo, h, nd, nd ? hd : d, contract);
  if (!t) {
    wp_lock(fo);
    weft_tensor_destroy(h);
    wp_unlock(fo);
    goto done;
  }
  /* the tensor now owns the producer's memory: the capsule is consumed */
  PyCapsule_SetName(cap, "used_dltensor");
  t->shared = data;
  t->dl_managed = m;
  if (trans) {
    ret = PyObject_GetAttrString((PyObject *)t, "mT");
    Py_DECREF(t);
  } else
    ret = (PyObject *)t;
done:
  Py_DECREF(cap);
  return ret;
}
