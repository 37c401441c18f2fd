/* tensor.c - weft.Tensor: a weft_tensor as a Python object that behaves like an array: shape, dtype, len,
 * .T, @ + - * by scalars, numpy(), __array__, a repr that says where the value is and which contract its
 * operators run under. A view (.T of a matrix, .mT) shares its base's handle and is given to matmul as a
 * transposition; other ops make it real on its lane (weft_op_permute). */
#include <string.h>

#include "weftmodule.h"

TensorObject *wp_tensor_new(FabricObject *fo, weft_tensor *h, int ndim, const int64_t *dims, int contract) {
  TensorObject *t = PyObject_New(TensorObject, &WP_TensorType);
  if (!t) return NULL;
  Py_INCREF(fo);
  t->fab = fo;
  t->h = h;
  t->base = NULL;
  t->ndim = ndim;
  memset(t->dims, 0, sizeof t->dims);
  memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
  t->trans = 0;
  t->contract = contract;
  t->shared = NULL;
  t->shared_owned = 0;
  t->dl_managed = NULL;
  t->exports = 0;
  t->dev_lane = -1;
  t->weakreflist = NULL;
  return t;
}

static TensorObject *owner(TensorObject *t) { return t->base ? t->base : t; }

weft_tensor *wp_tensor_handle(TensorObject *t) {
  TensorObject *o = owner(t);
  if (!o->h) {
    wp_raise(WEFT_ERR_STATE, "this tensor is closed");
    return NULL;
  }
  if (!o->fab->f) {
    wp_raise(WEFT_ERR_STATE, "this tensor's fabric is closed");
    return NULL;
  }
  return o->h;
}

int wp_tensor_before_use(TensorObject *t) {
  t = owner(t);
  if (t->dev_lane >= 0) { /* what the other library wrote on the device is the value */
    void *addr;
    weft_status st;
    Py_BEGIN_ALLOW_THREADS st = weft_tensor_lane_address(t->h, (size_t)t->dev_lane, &addr);
    Py_END_ALLOW_THREADS
    if (st) return wp_raise_fabric(t->fab, st), -1;
    return 0;
  }
  if (!t->shared) return 0;
  weft_status st = weft_tensor_write(t->h, t->shared, weft_tensor_numel(t->h));
  if (st) return wp_raise_fabric(t->fab, st), -1;
  return 0;
}

int wp_tensor_after_write(TensorObject *t) {
  t = owner(t);
  if (t->dev_lane >= 0) return wp_tensor_before_use(t); /* the value back on the shared lane, finished */
  if (!t->shared) return 0;
  weft_status st;
  Py_BEGIN_ALLOW_THREADS st = weft_tensor_read(t->h, t->shared, weft_tensor_numel(t->h));
  Py_END_ALLOW_THREADS
  if (st) return wp_raise_fabric(t->fab, st), -1;
  return 0;
}

/* A view made real: a new tensor holding the view's value, computed on the lane (permute). The caller
 * holds the fabric lock. */
int wp_tensor_materialize(TensorObject *t, weft_tensor **out_h, TensorObject **out_tmp) {
  weft_tensor *src = wp_tensor_handle(t);
  if (!src) return -1;
  if (wp_tensor_before_use(t)) return -1;
  FabricObject *fo = t->fab;
  int nd;
  int64_t d[WEFT_MAX_DIMS];
  weft_tensor_shape(src, &nd, d);
  int64_t od[WEFT_MAX_DIMS];
  int perm[WEFT_MAX_DIMS];
  for (int i = 0; i < nd; i++) perm[i] = i, od[i] = d[i];
  perm[nd - 1] = nd - 2, perm[nd - 2] = nd - 1;
  od[nd - 1] = d[nd - 2], od[nd - 2] = d[nd - 1];
  weft_tensor *h = NULL;
  weft_status st = weft_tensor_create(fo->f, nd, od, NULL, &h);
  if (!st) {
    weft_op_desc desc = {WEFT_CONTRACT_EXACT, WEFT_LANE_AUTO};
    st = weft_op_permute(fo->f, &desc, src, perm, h);
  }
  if (st) {
    wp_raise_fabric(fo, st);
    if (h) weft_tensor_destroy(h);
    return -1;
  }
  TensorObject *tmp = wp_tensor_new(fo, h, nd, od, t->contract);
  if (!tmp) return weft_tensor_destroy(h), -1;
  *out_h = h;
  *out_tmp = tmp;
  return 0;
}

/* ------------------------------------------------------------------------------------------- reading */

PyObject *wp_tensor_numpy(TensorObject *t, PyObject *out) {
  FabricObject *fo = t->fab;
  TensorObject *o = owner(t);
  npy_intp d[WEFT_MAX_DIMS];
  PyArrayObject *arr;
  /* the base's shape: a view is its base's value with two axes swapped */
  for (int i = 0; i < o->ndim; i++) d[i] = (npy_intp)o->dims[i];
  if (out && out != Py_None) {
    if (!PyArray_Check(out) || PyArray_TYPE((PyArrayObject *)out) != NPY_FLOAT32 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)out) || !PyArray_ISWRITEABLE((PyArrayObject *)out) ||
        !PyArray_ISNOTSWAPPED((PyArrayObject *)out) || !PyArray_ISALIGNED((PyArrayObject *)out))
      return PyErr_Format(PyExc_TypeError, "numpy(out=...): out must be a writable, aligned C-contiguous float32 "
                          "ndarray in native byte order");
    if (t->trans) { /* a .T view: its value is the base's with two axes swapped, read, swapped, then copied in */
      PyObject *v = wp_tensor_numpy(t, NULL);
      if (!v) return NULL;
      if (PyArray_SIZE((PyArrayObject *)v) != PyArray_SIZE((PyArrayObject *)out)) {
        Py_ssize_t have = PyArray_SIZE((PyArrayObject *)out), want = PyArray_SIZE((PyArrayObject *)v);
        Py_DECREF(v);
        return wp_raise(WEFT_ERR_SHAPE, "numpy(out=...): out holds %zd floats, the tensor %zd", have, want);
      }
      memcpy(PyArray_DATA((PyArrayObject *)out), PyArray_DATA((PyArrayObject *)v), (size_t)PyArray_NBYTES((PyArrayObject *)v));
      Py_DECREF(v);
      return Py_NewRef(out);
    }
    Py_INCREF(out);
    arr = (PyArrayObject *)out;
  } else {
    arr = (PyArrayObject *)PyArray_SimpleNew(o->ndim, d, NPY_FLOAT32);
    if (!arr) return NULL;
  }
  wp_lock(fo);
  weft_tensor *h = wp_tensor_handle(t);
  weft_status st = WEFT_OK;
  if (h) {
    size_t n = weft_tensor_numel(h);
    if ((size_t)PyArray_SIZE(arr) != n) {
      wp_unlock(fo);
      Py_DECREF(arr);
      return wp_raise(WEFT_ERR_SHAPE, "numpy(out=...): out holds %zd floats, the tensor %zu", PyArray_SIZE(arr), n);
    }
    if (o->dev_lane >= 0 && wp_tensor_before_use(o)) {
      st = WEFT_ERR_STATE; /* raised already */
    } else if (o->shared) {
      /* the memory is the value (no op is pending on it: ops that write it wait) */
      memcpy(PyArray_DATA(arr), o->shared, n * 4);
    } else {
      float *dst = (float *)PyArray_DATA(arr);
      Py_BEGIN_ALLOW_THREADS st = weft_tensor_read(h, dst, n);
      Py_END_ALLOW_THREADS
    }
  }
  if (h && st && !PyErr_Occurred()) wp_raise_fabric(fo, st);
  wp_unlock(fo);
  if (!h || st) {
    Py_DECREF(arr);
    return NULL;
  }
  if (t->trans) {
    PyObject *v = PyArray_SwapAxes(arr, o->ndim - 2, o->ndim - 1);
    Py_DECREF(arr);
    if (!v) return NULL;
    PyObject *c = PyArray_NewCopy((PyArrayObject *)v, NPY_CORDER);
    Py_DECREF(v);
    return c;
  }
  if (t->ndim == 0 && !(out && out != Py_None)) { /* a scalar tensor reads as a 0-d array */
    PyObject *z = PyArray_Newshape(arr, &(PyArray_Dims){NULL, 0}, NPY_CORDER);
    Py_DECREF(arr);
    return z;
  }
  return (PyObject *)arr;
}

static PyObject *Tensor_numpy(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"out"};
  PyObject *v[1];
  if (wp_parse("numpy", args, nargs, kw, names, v, 1, 0)) return NULL;
  return wp_tensor_numpy(t, v[0]);
}

static PyObject *Tensor_array(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"dtype", "copy"};
  PyObject *v[2];
  if (wp_parse("__array__", args, nargs, kw, names, v, 2, 0)) return NULL;
  if (v[1] == Py_False)
    return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "a weft Tensor's value may live on a device: numpy gets a copy, and "
                        "copy=False cannot be honoured (weft.from_dlpack / numpy.from_dlpack share memory)");
  PyObject *a = wp_tensor_numpy(t, NULL);
  if (!a || !v[0] || v[0] == Py_None) return a;
  PyArray_Descr *d = NULL;
  if (!PyArray_DescrConverter(v[0], &d)) {
    Py_DECREF(a);
    return NULL;
  }
  PyObject *r = PyArray_CastToType((PyArrayObject *)a, d, 0);
  Py_DECREF(a);
  return r;
}

static int64_t numel(TensorObject *t);

static PyObject *Tensor_write(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"data", "dtype"};
  PyObject *v[2];
  if (wp_parse("write", args, nargs, kw, names, v, 2, 1)) return NULL;
  int convert = v[1] && v[1] != Py_None;
  if (convert) {
    PyArray_Descr *d = NULL;
    if (!PyArray_DescrConverter(v[1], &d)) return NULL;
    int ok = d->type_num == NPY_FLOAT32;
    Py_DECREF(d);
    if (!ok) return PyErr_Format(PyExc_TypeError, "write: weft tensors hold float32; pass dtype=numpy.float32 or leave it out");
  }
  PyArrayObject *a = wp_as_f32(t->fab, v[0], "write", "data", convert);
  if (!a) return NULL;
  if (t->trans) { /* writing a view: the data, in the view's shape (as many elements, read in C order, as for any
                   * tensor), goes to the base transposed */
    if ((int64_t)PyArray_SIZE(a) != numel(t)) {
      Py_ssize_t have = PyArray_SIZE(a);
      Py_DECREF(a);
      return wp_raise(WEFT_ERR_SHAPE, "write: %zd floats given, the tensor holds %lld", have, (long long)numel(t));
    }
    npy_intp vd[WEFT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) vd[i] = (npy_intp)t->dims[i];
    PyArray_Dims shape = {vd, t->ndim};
    PyObject *r = PyArray_Newshape(a, &shape, NPY_CORDER);
    Py_DECREF(a);
    if (!r) return NULL;
    a = (PyArrayObject *)r;
    PyObject *s = PyArray_SwapAxes(a, PyArray_NDIM(a) - 2, PyArray_NDIM(a) - 1);
    Py_DECREF(a);
    if (!s) return NULL;
    a = (PyArrayObject *)s;
  }
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
    PyArrayObject *c = (PyArrayObject *)PyArray_NewCopy(a, NPY_CORDER);
    Py_DECREF(a);
    if (!(a = c)) return NULL;
    t->fab->copies++; /* counted, as every copy weft makes */
  }
  FabricObject *fo = t->fab;
  wp_lock(fo);
  weft_tensor *h = wp_tensor_handle(t);
  weft_status st = WEFT_OK;
  if (h) {
    st = weft_tensor_write(h, (const float *)PyArray_DATA(a), (size_t)PyArray_SIZE(a));
    if (st) wp_raise_fabric(fo, st);
  }
  wp_unlock(fo);
  Py_DECREF(a);
  if (!h || st) return NULL;
  return Py_NewRef((PyObject *)t);
}

static void tensor_destroy_handle(TensorObject *t) {
  if (t->base || !t->h) return;
  FabricObject *fo = t->fab;
  wp_lock(fo);
  if (fo->f) weft_tensor_destroy(t->h);
  wp_unlock(fo);
  t->h = NULL;
}

static PyObject *Tensor_close(TensorObject *t, PyObject *u) {
  (void)u;
  tensor_destroy_handle(t);
  Py_RETURN_NONE;
}

static void Tensor_dealloc(TensorObject *t) {
  if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
  tensor_destroy_handle(t);
  if (t->dl_managed) wp_dlpack_release(t->dl_managed);
  if (t->shared_owned) free(t->shared);
  Py_XDECREF(t->base);
  Py_XDECREF(t->fab);
  PyObject_Free(t);
}

/* ------------------------------------------------------------------------------------------ attributes */

static PyObject *Tensor_get_shape(TensorObject *t, void *c) { (void)c; return wp_shape_tuple(t->ndim, t->dims); }
static PyObject *Tensor_get_ndim(TensorObject *t, void *c) { (void)c; return PyLong_FromLong(t->ndim); }
static int64_t numel(TensorObject *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
  return n;
}
static PyObject *Tensor_get_size(TensorObject *t, void *c) { (void)c; return PyLong_FromLongLong(numel(t)); }
static PyObject *Tensor_get_nbytes(TensorObject *t, void *c) { (void)c; return PyLong_FromLongLong(4 * numel(t)); }
static PyObject *Tensor_get_dtype(TensorObject *t, void *c) { (void)t, (void)c; return Py_NewRef(wp_dtype_f32); }
static PyObject *Tensor_get_fabric(TensorObject *t, void *c) { (void)c; return Py_NewRef((PyObject *)t->fab); }
static PyObject *Tensor_get_base(TensorObject *t, void *c) {
  (void)c;
  return Py_NewRef(t->base ? (PyObject *)t->base : Py_None);
}
static PyObject *Tensor_get_contract(TensorObject *t, void *c) {
  (void)c;
  return PyUnicode_FromString(wp_contract_names[t->contract]);
}
static PyObject *Tensor_get_closed(TensorObject *t, void *c) {
  (void)c;
  return PyBool_FromLong(!owner(t)->h || !t->fab->f);
}

static PyObject *Tensor_get_location(TensorObject *t, void *c) {
  (void)c;
  wp_lock(t->fab);
  weft_tensor *h = wp_tensor_handle(t);
  PyObject *r = h ? PyUnicode_FromString(weft_tensor_location(h)) : NULL;
  wp_unlock(t->fab);
  if (!r) wp_name_error("location");
  return r;
}

static TensorObject *make_view(TensorObject *t) {
  TensorObject *o = owner(t);
  TensorObject *v = wp_tensor_new(t->fab, NULL, t->ndim, t->dims, t->contract);
  if (!v) return NULL;
  Py_INCREF(o);
  v->base = o;
  v->trans = !t->trans;
  int64_t x = v->dims[t->ndim - 1];
  v->dims[t->ndim - 1] = v->dims[t->ndim - 2];
  v->dims[t->ndim - 2] = x;
  if (!v->trans) { /* the view of a view is the base again */
    Py_DECREF(v);
    return (TensorObject *)Py_NewRef((PyObject *)o);
  }
  return v;
}

/* numpy's .T: every axis reversed. Rank 2: a view; rank 3 and 4: a new tensor permuted on the lane. */
static PyObject *Tensor_get_T(TensorObject *t, void *c) {
  (void)c;
  if (t->ndim < 2) return Py_NewRef((PyObject *)t);
  if (t->ndim == 2) return (PyObject *)make_view(t);
  if (t->dims[0] == 0 || t->dims[1] == 0) { /* reversed, an empty batch dimension would be a matrix's */
    char sb[160];
    int64_t rd[WEFT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) rd[i] = t->dims[t->ndim - 1 - i];
    return wp_raise(WEFT_ERR_SHAPE, ".T: the transpose has shape %s, which a weft tensor cannot hold (only the batch "
                    "dimensions of a rank-3 or rank-4 tensor may be 0): use .mT, or numpy's .T of numpy(t)",
                    wp_fmt_shape(sb, sizeof sb, t->ndim, rd));
  }
  FabricObject *fo = t->fab;
  wp_lock(fo);
  PyObject *ret = NULL;
  weft_tensor *tmp_h = NULL, *src;
  TensorObject *tmp = NULL;
  if (t->trans) { /* reverse the view's axes: materialise it first */
    if (wp_tensor_materialize(t, &tmp_h, &tmp)) goto done;
    src = tmp_h;
  } else {
    if (!(src = wp_tensor_handle(t)) || wp_tensor_before_use(t)) goto done;
  }
  int perm[WEFT_MAX_DIMS];
  int64_t od[WEFT_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) perm[i] = t->ndim - 1 - i, od[i] = t->dims[t->ndim - 1 - i];
  weft_tensor *h = NULL;
  weft_status st = weft_tensor_create(fo->f, t->ndim, od, NULL, &h);
  weft_op_desc desc = {WEFT_CONTRACT_EXACT, WEFT_LANE_AUTO};
  if (!st) st = weft_op_permute(fo->f, &desc, src, perm, h);
  if (st) {
    wp_raise_fabric(fo, st);
    if (h) weft_tensor_destroy(h);
    goto done;
  }
  if (!(ret = (PyObject *)wp_tensor_new(fo, h, t->ndim, od, t->contract))) weft_tensor_destroy(h);
done:
  wp_unlock(fo);
  Py_XDECREF(tmp);
  return ret;
}

static PyObject *Tensor_get_mT(TensorObject *t, void *c) {
  (void)c;
  if (t->ndim < 2) return wp_raise(WEFT_ERR_SHAPE, "mT: the tensor has %d dimension(s); it needs 2 or more", t->ndim);
  return (PyObject *)make_view(t);
}

static PyObject *Tensor_with_contract(TensorObject *t, PyObject *arg) {
  int c;
  if (wp_contract(arg, &c)) return NULL;
  TensorObject *o = owner(t);
  TensorObject *v = wp_tensor_new(t->fab, NULL, t->ndim, t->dims, c);
  if (!v) return NULL;
  Py_INCREF(o);
  v->base = o;
  v->trans = t->trans;
  return (PyObject *)v;
}

static PyObject *Tensor_repr(TensorObject *t) {
  char sb[160];
  wp_fmt_shape(sb, sizeof sb, t->ndim, t->dims);
  TensorObject *o = owner(t);
  if (!o->h || !t->fab->f)
    return PyUnicode_FromFormat("<weft.Tensor shape=%s float32 closed>", sb);
  wp_lock(t->fab);
  PyObject *loc = PyUnicode_FromString(weft_tensor_location(o->h));
  wp_unlock(t->fab);
  if (!loc) return NULL;
  PyObject *r = PyUnicode_FromFormat("<weft.Tensor shape=%s float32 lane=%U contract=%s%s%s>", sb, loc,
                                     wp_contract_names[t->contract], t->trans ? " view=.T" : "",
                                     o->shared || o->dev_lane >= 0 ? " shared" : "");
  Py_DECREF(loc);
  return r;
}

static Py_ssize_t Tensor_len(TensorObject *t) {
  if (t->ndim == 0) {
    PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
    return -1;
  }
  return (Py_ssize_t)t->dims[0];
}

/* -------------------------------------------------------------------------------------------- operators */

/* A real number the operators take as a scalar: a Python int or float, a numpy integer or floating scalar, or a
 * 0-d array of one. Not bool (numpy's is not a number either), complex (converting drops the imaginary part),
 * timedelta or anything else: those go on as operands, and are refused with their dtype. */
static int is_scalar(PyObject *o) {
  if (PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o))) return 1;
  if (PyArray_IsScalar(o, Integer) || PyArray_IsScalar(o, Floating))
    return !PyArray_IsScalar(o, Timedelta);
  if (!PyArray_Check(o) || PyArray_NDIM((PyArrayObject *)o) != 0) return 0;
  const char kind = PyArray_DESCR((PyArrayObject *)o)->kind;
  return kind == 'i' || kind == 'u' || kind == 'f';
}

/* The contract an operator runs under: the tensors'. Two tensors that disagree do not pick for the caller. */
static int op_contract(PyObject *a, PyObject *b, const char *op, int *out) {
  int ca = WP_IS_TENSOR(a) ? ((TensorObject *)a)->contract : -1;
  int cb = WP_IS_TENSOR(b) ? ((TensorObject *)b)->contract : -1;
  if (ca >= 0 && cb >= 0 && ca != cb) {
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s: the operands run under different contracts (%s and %s); say which with "
                 "fabric's op and contract=..., or t.with_contract(...)", op, wp_contract_names[ca],
                 wp_contract_names[cb]);
    return -1;
  }
  *out = ca >= 0 ? ca : cb;
  return 0;
}

static FabricObject *op_fabric(PyObject *a, PyObject *b) {
  return WP_IS_TENSOR(a) ? ((TensorObject *)a)->fab : ((TensorObject *)b)->fab;
}

static PyObject *Tensor_matmul(PyObject *a, PyObject *b) {
  if (!WP_IS_TENSOR(a) && !WP_IS_TENSOR(b)) Py_RETURN_NOTIMPLEMENTED;
  if (is_scalar(WP_IS_TENSOR(a) ? b : a))
    return wp_raise(WEFT_ERR_SHAPE, "@: one operand is a scalar; matmul needs operands with at least one "
                        "dimension (multiply by a scalar with *)");
  int c;
  if (op_contract(a, b, "@", &c)) return NULL;
  return wp_matmul_impl(op_fabric(a, b), a, b, c, WEFT_LANE_AUTO, 0, 0, NULL, -1, 1, "@", "the left operand",
                        "the right operand", 0, 0);
}

PyObject *wp_scale_tensor(TensorObject *t, double alpha, const char *op) {
  return wp_ew_op(t->fab, EW_SCALE, op, (PyObject *)t, "the tensor", NULL, NULL, (float)alpha, t->contract,
                  WEFT_LANE_AUTO, NULL, -1);
}

/* x + sign*s for a scalar s: a row of s added to every row (weft's add broadcasts one row). */
static PyObject *add_scalar(TensorObject *t, PyObject *s, int negate) {
  double v = PyFloat_AsDouble(s);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  if (negate) v = -v;
  npy_intp n = t->ndim ? (npy_intp)t->dims[t->ndim - 1] : 1;
  /* of a 0-d tensor: a 0-d array, its own shape */
  PyArrayObject *row = (PyArrayObject *)PyArray_SimpleNew(t->ndim ? 1 : 0, &n, NPY_FLOAT32);
  if (!row) return NULL;
  float fv = (float)v;
  for (npy_intp i = 0; i < n; i++) ((float *)PyArray_DATA(row))[i] = fv;
  PyObject *r = wp_ew_op(t->fab, EW_ADD, "+", (PyObject *)t, "the tensor", (PyObject *)row, "the scalar", 0,
                         t->contract, WEFT_LANE_AUTO, NULL, -1);
  Py_DECREF(row);
  return r;
}

static int64_t size_of(PyObject *o) {
  if (WP_IS_TENSOR(o)) return numel((TensorObject *)o);
  if (PyArray_Check(o)) return PyArray_SIZE((PyArrayObject *)o);
  return -1;
}

static int ndim_of(PyObject *o) {
  if (WP_IS_TENSOR(o)) return ((TensorObject *)o)->ndim;
  if (PyArray_Check(o)) return PyArray_NDIM((PyArrayObject *)o);
  return -1;
}

/* x + y with optional negations: (-1 * y) and (-1 * x) are exact, so x - y has x + (-y)'s bits. */
static PyObject *add_impl(PyObject *x, PyObject *y, int negate_y, const char *op) {
  if (!WP_IS_TENSOR(x) && !WP_IS_TENSOR(y)) Py_RETURN_NOTIMPLEMENTED;
  if (is_scalar(y)) return add_scalar((TensorObject *)x, y, negate_y);
  if (is_scalar(x)) {
    PyObject *ny = negate_y ? wp_scale_tensor((TensorObject *)y, -1.0, op) : Py_NewRef(y);
    if (!ny) return NULL;
    PyObject *r = add_scalar((TensorObject *)ny, x, 0);
    Py_DECREF(ny);
    return r;
  }
  int c;
  if (op_contract(x, y, op, &c)) return NULL;
  FabricObject *fo = op_fabric(x, y);
  PyObject *yy = Py_NewRef(y);
  if (negate_y) {
    Py_DECREF(yy);
    if (WP_IS_TENSOR(y)) yy = wp_scale_tensor((TensorObject *)y, -1.0, op);
    else yy = wp_ew_op(fo, EW_SCALE, op, y, "the right operand", NULL, NULL, -1.0f, c, WEFT_LANE_AUTO, NULL, -1);
    if (!yy) return NULL;
  }
  /* the larger operand (or of one size, the higher rank: [1] + [1, 1, 1]) is x: a row added to a matrix reads
   * the same either way round (each keeps its name) */
  PyObject *a = x, *b = yy;
  const char *na = "the left operand", *nb = "the right operand";
  if (size_of(b) > size_of(a) || (size_of(b) == size_of(a) && ndim_of(b) > ndim_of(a)))
    a = yy, b = x, na = "the right operand", nb = "the left operand";
  PyObject *r = wp_ew_op(fo, EW_ADD, op, a, na, b, nb, 0, c, WEFT_LANE_AUTO, NULL, -1);
  Py_DECREF(yy);
  return r;
}

static PyObject *Tensor_add(PyObject *x, PyObject *y) { return add_impl(x, y, 0, "+"); }

static PyObject *Tensor_sub(PyObject *x, PyObject *y) {
  if (!WP_IS_TENSOR(x) && !WP_IS_TENSOR(y)) Py_RETURN_NOTIMPLEMENTED;
  if (!WP_IS_TENSOR(x) && is_scalar(x)) { /* s - t = (-t) + s */
    PyObject *nt = wp_scale_tensor((TensorObject *)y, -1.0, "-");
    if (!nt) return NULL;
    PyObject *r = add_scalar((TensorObject *)nt, x, 0);
    Py_DECREF(nt);
    return r;
  }
  if (!WP_IS_TENSOR(x)) { /* array - tensor */
    PyObject *nt = wp_scale_tensor((TensorObject *)y, -1.0, "-");
    if (!nt) return NULL;
    PyObject *r = add_impl(x, nt, 0, "-");
    Py_DECREF(nt);
    return r;
  }
  return add_impl(x, y, 1, "-");
}

static PyObject *Tensor_mul(PyObject *x, PyObject *y) {
  PyObject *t = WP_IS_TENSOR(x) ? x : y, *s = WP_IS_TENSOR(x) ? y : x;
  if (!WP_IS_TENSOR(t)) Py_RETURN_NOTIMPLEMENTED;
  if (!is_scalar(s)) {
    if (WP_IS_TENSOR(s) || PyArray_Check(s))
      return PyErr_Format(PyExc_TypeError, "*: weft multiplies a tensor by a scalar (a real number); for the matrix product use @");
    Py_RETURN_NOTIMPLEMENTED;
  }
  double v = PyFloat_AsDouble(s);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  return wp_scale_tensor((TensorObject *)t, v, "*");
}

static PyObject *Tensor_neg(PyObject *x) { return wp_scale_tensor((TensorObject *)x, -1.0, "-"); }
static PyObject *Tensor_pos(PyObject *x) { return Py_NewRef(x); }

/* the operators' errors name the operator ("+: ..."), those of a conversion (an int too large) too */
#define WP_NAMED_BINARY(impl, op)                                                                               \
  static PyObject *impl##_named(PyObject *x, PyObject *y) {                                                     \
    PyObject *r = impl(x, y);                                                                                   \
    if (!r) wp_name_error(op);                                                                                  \
    return r;                                                                                                   \
  }
WP_NAMED_BINARY(Tensor_add, "+")
WP_NAMED_BINARY(Tensor_sub, "-")
WP_NAMED_BINARY(Tensor_mul, "*")
WP_NAMED_BINARY(Tensor_matmul, "@")
static PyObject *Tensor_neg_named(PyObject *x) {
  PyObject *r = Tensor_neg(x);
  if (!r) wp_name_error("-");
  return r;
}

static PyNumberMethods Tensor_as_number = {
    .nb_add = Tensor_add_named,
    .nb_subtract = Tensor_sub_named,
    .nb_multiply = Tensor_mul_named,
    .nb_negative = Tensor_neg_named,
    .nb_positive = Tensor_pos,
    .nb_matrix_multiply = Tensor_matmul_named,
};

static PyMappingMethods Tensor_as_mapping = {.mp_length = (lenfunc)Tensor_len};

static PyObject *Tensor_new_refused(PyTypeObject *type, PyObject *args, PyObject *kw) {
  (void)type, (void)args, (void)kw;
  PyErr_SetString(PyExc_TypeError, "create tensors with fabric.tensor(data), fabric.zeros(shape), weft.tensor(data) "
                                   "or weft.from_dlpack(x)");
  return NULL;
}

WP_NAMED_FAST(TensorObject, Tensor_numpy, "numpy")
WP_NAMED_FAST(TensorObject, Tensor_array, "__array__")
WP_NAMED_FAST(TensorObject, Tensor_write, "write")
WP_NAMED_1(TensorObject, Tensor_close, "close")
WP_NAMED_1(TensorObject, Tensor_with_contract, "with_contract")
WP_NAMED_FAST(TensorObject, wp_tensor_dlpack, "__dlpack__")
WP_NAMED_1(TensorObject, wp_tensor_dlpack_device, "__dlpack_device__")

#define FAST (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef Tensor_methods[] = {
    {"numpy", (PyCFunction)(void (*)(void))Tensor_numpy_named, FAST,
     "numpy(out=None)\n--\n\nThe value as a new float32 ndarray (or written into `out`, a writable C-contiguous\n"
     "float32 array of as many elements). Waits for pending work, and flushes an open scope on the lane\n"
     "that holds the value."},
    {"__array__", (PyCFunction)(void (*)(void))Tensor_array_named, FAST,
     "__array__(dtype=None, copy=None)\n--\n\nnumpy.asarray(t): the value as an ndarray (a copy; see numpy.from_dlpack "
     "for shared memory)."},
    {"write", (PyCFunction)(void (*)(void))Tensor_write_named, FAST,
     "write(data, dtype=None)\n--\n\nReplaces the value with `data` (float32, as many elements; dtype=numpy.float32\n"
     "converts other real dtypes). Returns the tensor."},
    {"close", (PyCFunction)Tensor_close_named, METH_NOARGS,
     "close()\n--\n\nDestroys the tensor and its copies on every lane now (otherwise that happens when it is\n"
     "collected). Views of it close with it."},
    {"with_contract", (PyCFunction)Tensor_with_contract_named, METH_O,
     "with_contract(contract)\n--\n\nThe same tensor (a view sharing its value) whose operators run under another\n"
     "contract: t.with_contract('fp32') @ u."},
    {"__dlpack__", (PyCFunction)(void (*)(void))wp_tensor_dlpack_named, FAST,
     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "The DLPack capsule of this tensor's host memory (numpy.from_dlpack, torch.from_dlpack): shared, not\n"
     "copied. From the first export on, the memory is the value whenever Python runs: ops that write\n"
     "the tensor bring their result home before they return, and ops that read it see what was written\n"
     "through the other side."},
    {"__dlpack_device__", (PyCFunction)wp_tensor_dlpack_device_named, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(device type, device id) of the memory __dlpack__ hands out: (2, N) for a value that\n"
     "lives on cuda:N alone (or came from CUDA memory), else (1, 0), the host."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tensor_getset[] = {
    {"shape", (getter)Tensor_get_shape, NULL, "The shape, a tuple of ints.", NULL},
    {"ndim", (getter)Tensor_get_ndim, NULL, "The number of dimensions.", NULL},
    {"size", (getter)Tensor_get_size, NULL, "The number of elements.", NULL},
    {"nbytes", (getter)Tensor_get_nbytes, NULL, "The bytes the elements take (4 each).", NULL},
    {"dtype", (getter)Tensor_get_dtype, NULL, "numpy.dtype('float32'): weft computes in float32.", NULL},
    {"T", (getter)Tensor_get_T, NULL,
     "The transpose, as numpy's .T (every axis reversed). Of a matrix: a view sharing the value, given\n"
     "to matmul as a transposition (no copy); of rank 3 or 4: a new tensor permuted on its lane.", NULL},
    {"mT", (getter)Tensor_get_mT, NULL, "The last two axes swapped: a view sharing the value.", NULL},
    {"location", (getter)Tensor_get_location, NULL,
     "Where the current value lives: 'host', a lane name, or several joined by ','.", NULL},
    {"contract", (getter)Tensor_get_contract, NULL,
     "The contract this tensor's operators (@ + - *) run under: the one it was made with or computed under.", NULL},
    {"fabric", (getter)Tensor_get_fabric, NULL, "The fabric the tensor belongs to.", NULL},
    {"base", (getter)Tensor_get_base, NULL, "For a view (.T, .mT, with_contract), the tensor it shares; else None.", NULL},
    {"closed", (getter)Tensor_get_closed, NULL, "True once the tensor (or its fabric) was closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject WP_TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An fp32 tensor of a fabric (rank 0 to 4). Its value stays on the lane that last computed it until\n"
              "it is read (numpy(), np.asarray), so chains of ops on tensors move no data through the host.\n"
              "It behaves like an array: shape, dtype, ndim, size, len(), .T, @ with tensors and arrays, + and -\n"
              "with tensors, arrays and scalars, * by a scalar, unary -. Operators run under the tensor's\n"
              "contract (see with_contract). Make one with fabric.tensor(data), fabric.zeros(shape),\n"
              "weft.tensor(data), or weft.from_dlpack(x) to share memory with numpy or PyTorch.",
    .tp_new = Tensor_new_refused,
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_repr = (reprfunc)Tensor_repr,
    .tp_as_number = &Tensor_as_number,
    .tp_as_mapping = &Tensor_as_mapping,
    .tp_methods = Tensor_methods,
    .tp_getset = Tensor_getset,
    .tp_weaklistoffset = offsetof(TensorObject, weakreflist),
};
