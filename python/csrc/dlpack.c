/* dlpack.c - DLPack in and out (the unversioned "dltensor" capsule that numpy >= 1.22 and PyTorch speak):
 * a Tensor's memory handed to numpy or PyTorch without a copy - its host memory, or a cuda lane's device
 * memory (weft_tensor_lane_address) for a value that lives there - and their memory wrapped as a Tensor
 * without a copy (weft_tensor_wrap for host memory, weft_tensor_wrap_lane for CUDA memory). The structures
 * are DLPack's own (dlpack.h, v0.8 ABI). */
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

/* The cuda lane index named "cuda:<ordinal>", or -1. */
static int cuda_lane(FabricObject *fo, int ordinal) {
  char name[32];
  snprintf(name, sizeof name, "cuda:%d", ordinal);
  PyObject *i = PyDict_GetItemString(fo->lane_index, name);
  return i ? (int)PyLong_AsLong(i) : -1;
}

/* Where an export hands out memory: the lane (cuda:N) whose copy is shared, or -1 for host memory. A tensor
 * shares one place: its first export (or its import) decides, and so does a value living on cuda:N alone. */
static int export_lane(TensorObject *o, int *ordinal) {
  FabricObject *fo = o->fab;
  const char *name = NULL;
  if (o->dev_lane >= 0) name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(fo->lane_names, o->dev_lane));
  else if (!o->shared && o->h && fo->f) {
    const char *loc = weft_tensor_location(o->h);
    if (loc && strncmp(loc, "cuda:", 5) == 0 && !strchr(loc, ',') && !strchr(loc, '.')) name = loc;
  }
  if (!name || sscanf(name, "cuda:%d", ordinal) != 1) return -1;
  return cuda_lane(fo, *ordinal);
}

PyObject *wp_tensor_dlpack(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"stream", "max_version", "dl_device", "copy"};
  PyObject *v[4];
  if (wp_parse("__dlpack__", args, nargs, kwnames, names, v, 4, 0)) return NULL;
  TensorObject *o = t->base ? t->base : t;
  FabricObject *fo = t->fab;
  int ordinal = 0;
  wp_lock(fo);
  int lane = export_lane(o, &ordinal);
  wp_unlock(fo);
  if (v[2] && v[2] != Py_None) {
    int type = -1, id = -1;
    if (!PyTuple_Check(v[2]) || !PyArg_ParseTuple(v[2], "ii", &type, &id)) {
      PyErr_Clear();
      return PyErr_Format(PyExc_TypeError, "__dlpack__: dl_device must be a (device type, device id) tuple of ints, "
                          "as __dlpack_device__() returns");
    }
    if (type == kDLCUDA && !o->shared && (lane = cuda_lane(fo, id)) >= 0) {
      ordinal = id;
    } else if (type == kDLCPU && o->dev_lane < 0) {
      lane = -1;
    } else
      return PyErr_Format(PyExc_BufferError, "__dlpack__: dl_device=(%d, %d): this tensor shares %s memory", type, id,
                          o->dev_lane >= 0 ? "CUDA" : o->shared ? "host" : "host or a cuda lane's");
  }
  if (v[3] == Py_True)
    return PyErr_Format(PyExc_BufferError, "__dlpack__: copy=True: take numpy.asarray(t) for a copy; DLPack here "
                        "shares the tensor's memory");
  void *data = NULL;
  wp_lock(fo);
  int rc = 0;
  if (lane >= 0) {
    weft_tensor *h = wp_tensor_handle(o);
    weft_status st = WEFT_ERR_STATE;
    if (h) {
      Py_BEGIN_ALLOW_THREADS st = weft_tensor_lane_address(h, (size_t)lane, &data);
      Py_END_ALLOW_THREADS
      if (st) wp_raise_fabric(fo, st);
      else o->dev_lane = lane;
    }
    rc = st ? -1 : 0;
  } else {
    rc = share(o);
    data = o->shared;
  }
  wp_unlock(fo);
  if (rc) return NULL;
  export_block *b = calloc(1, sizeof *b);
  if (!b) return PyErr_NoMemory();
  DLTensor *dl = &b->m.dl_tensor;
  dl->data = data;
  dl->device.device_type = lane >= 0 ? kDLCUDA : kDLCPU;
  dl->device.device_id = lane >= 0 ? ordinal : 0;
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
  (void)unused;
  TensorObject *o = t->base ? t->base : t;
  int ordinal = 0;
  wp_lock(t->fab);
  int lane = export_lane(o, &ordinal);
  wp_unlock(t->fab);
  return lane >= 0 ? Py_BuildValue("(ii)", kDLCUDA, ordinal) : Py_BuildValue("(ii)", kDLCPU, 0);
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
  if (WP_IS_TENSOR(x) && ((TensorObject *)x)->fab == fo) { /* already this fabric's: itself, under `contract` */
    if (((TensorObject *)x)->contract == contract) return Py_NewRef(x);
    return PyObject_CallMethod(x, "with_contract", "s", wp_contract_names[contract]);
  }
  /* another fabric's tensor comes through DLPack like any producer's memory: shared, not copied */
  PyObject *dev = PyObject_CallMethod(x, "__dlpack_device__", NULL);
  if (!dev) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      if (PyObject_HasAttrString(x, "__dlpack__"))
        return PyErr_Format(PyExc_TypeError, "from_dlpack: %s has __dlpack__ but no __dlpack_device__, which DLPack "
                            "producers have (numpy arrays and PyTorch tensors do)", Py_TYPE(x)->tp_name);
      return PyErr_Format(PyExc_TypeError, "from_dlpack: %s has no __dlpack__ (numpy arrays and PyTorch tensors do)",
                          Py_TYPE(x)->tp_name);
    }
    return NULL;
  }
  int dtype = 0, did = 0;
  if (!PyTuple_Check(dev) || !PyArg_ParseTuple(dev, "ii", &dtype, &did)) {
    Py_DECREF(dev);
    PyErr_Clear();
    return PyErr_Format(PyExc_TypeError, "from_dlpack: %s.__dlpack_device__() did not return a (device type, device "
                        "id) tuple of ints", Py_TYPE(x)->tp_name);
  }
  Py_DECREF(dev);
  int lane = -1;
  if (dtype == kDLCUDA) {
    if ((lane = cuda_lane(fo, did)) < 0)
      return PyErr_Format(PyExc_BufferError, "from_dlpack: the memory is on CUDA device %d, and this fabric has no "
                          "lane cuda:%d (see weft.devices() for why)", did, did);
  } else if (dtype != kDLCPU && dtype != kDLCUDAHost)
    return PyErr_Format(PyExc_BufferError, "from_dlpack: the memory is on DLPack device type %d; weft takes host "
                        "memory (1) and CUDA memory (2) of a cuda lane's device", dtype);
  /* CUDA: no stream is named, so the producer orders nothing; the lane waits for the device when it takes
   * the memory (weft_tensor_wrap_lane) */
  PyObject *cap = PyObject_CallMethod(x, "__dlpack__", NULL);
  if (!cap) return NULL;
  DLManagedTensor *m = PyCapsule_IsValid(cap, "dltensor") ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
  if (!m) {
    Py_DECREF(cap);
    PyErr_Clear();
    return PyErr_Format(PyExc_TypeError, "from_dlpack: %s.__dlpack__() did not return an unused DLPack capsule "
                        "(\"dltensor\")", Py_TYPE(x)->tp_name);
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
    wp_raise(WEFT_ERR_SHAPE, "from_dlpack: the array %s is empty; weft shares memory of at least one element "
             "(fabric.tensor copies an empty array, where a tensor can hold its shape)",
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
  weft_status st;
  if (lane >= 0) {
    Py_BEGIN_ALLOW_THREADS st = weft_tensor_wrap_lane(fo->f, (size_t)lane, hnd, hd, data, &h);
    Py_END_ALLOW_THREADS
  } else
    st = weft_tensor_wrap(fo->f, hnd, hd, data, &h);
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
  if (lane >= 0) t->dev_lane = lane;
  else t->shared = data;
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
