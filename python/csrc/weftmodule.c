/* weftmodule.c - weft._weft, the CPython extension behind the weft package: the module, errors, argument
 * parsing, the Fabric type (lanes, scratch tensors for array operands, every op on arrays and tensors, scopes,
 * routing and cost-model queries). tensor.c holds the Tensor type, dlpack.c DLPack, py_gpt.c the GPT model.
 *
 * Written against the CPython C API directly (python/README.md says why): the op calls parse their own
 * arguments (METH_FASTCALL) and reach weft.h with no layer between, so an op on resident tensors costs
 * about what the library costs. */
#define WEFT_IMPORT_ARRAY
#include "weftmodule.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

PyObject *wp_errors, *wp_base_error;
PyObject *wp_dtype_f32, *wp_dtype_i32;
const char *const wp_contract_names[4] = {"exact", "fp32", "tf32", "bf16"};
static PyObject *contract_str[4];

/* ------------------------------------------------------------------------------------------------ errors */

/* The library's messages start with the C function ("weft_op_add: ..."): a Python caller called add, so the
 * message names that instead ("add: ..."), never a C function. */
static const char *clean_message(const char *m, char *buf, size_t len) {
  if (!m) return "";
  if (strncmp(m, "weft_", 5) != 0) return m;
  const size_t n = strspn(m + 5, "abcdefghijklmnopqrstuvwxyz0123456789_");
  if (n == 0 || m[5 + n] != ':') return m;
  static const struct {
    const char *c, *py;
  } named[] = {{"fabric_open", "Fabric"}, {"tensor_create", "tensor"}, {"tensor_wrap", "from_dlpack"},
               {"fabric_calibration_wait", "calibration_wait"}};
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
    if (strlen(named[i].c) == n && strncmp(m + 5, named[i].c, n) == 0) {
      snprintf(buf, len, "%s%s", named[i].py, m + 5 + n);
      return buf;
    }
  static const char *const prefixes[] = {"op_", "tensor_", "fabric_"}; /* weft_fabric_calibrate: calibrate */
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (strncmp(m + 5, prefixes[i], strlen(prefixes[i])) == 0 && n > strlen(prefixes[i])) return m + 5 + strlen(prefixes[i]);
  return m + 5; /* weft_route_explain: route_explain */
}

PyObject *wp_raise_status(weft_status st, const char *message) {
  char buf[1024];
  const char *m = clean_message(message, buf, sizeof buf);
  if (!*m) m = weft_status_str(st);
  PyObject *cls = NULL;
  if (wp_errors) {
    PyObject *key = PyLong_FromLong((long)st);
    if (key) {
      cls = PyDict_GetItemWithError(wp_errors, key);
      Py_DECREF(key);
    }
  }
  if (!cls) cls = wp_base_error ? wp_base_error : PyExc_RuntimeError;
  if (PyErr_Occurred()) return NULL;
  PyObject *e = PyObject_CallFunction(cls, "s", m);
  if (!e) return NULL;
  if (cls == wp_base_error) {
    PyObject *code = PyLong_FromLong((long)st);
    if (code) PyObject_SetAttrString(e, "status", code);
    Py_XDECREF(code);
  }
  PyErr_SetObject(cls, e);
  Py_DECREF(e);
  return NULL;
}

PyObject *wp_raise_fabric(FabricObject *fo, weft_status st) {
  return wp_raise_status(st, fo && fo->f ? weft_fabric_last_error(fo->f) : "");
}

PyObject *wp_raise(weft_status st, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return wp_raise_status(st, buf);
}

void wp_name_error(const char *fn) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type) return;
  PyErr_NormalizeException(&type, &value, &tb);
  int weft = wp_base_error && value && PyObject_IsInstance(value, wp_base_error) == 1;
  int builtin = type == PyExc_TypeError || type == PyExc_ValueError || type == PyExc_OverflowError ||
                type == PyExc_BufferError;
  PyObject *msg = (weft || builtin) && value ? PyObject_Str(value) : NULL;
  const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
  size_t n = strlen(fn);
  if (!m || (strncmp(m, fn, n) == 0 && (m[n] == ':' || m[n] == '('))) {
    PyErr_Clear(); /* a message that cannot be read stays as it was */
    Py_XDECREF(msg);
    PyErr_Restore(type, value, tb);
    return;
  }
  /* the library's own words for the call ("train step: ...") give way to its Python name */
  size_t k = 0;
  while (k < n && m[k] && (m[k] == fn[k] || (m[k] == ' ' && fn[k] == '_'))) k++;
  if (k == n && m[n] == ':') m += n + (m[n + 1] == ' ' ? 2 : 1);
  PyObject *named = PyUnicode_FromFormat("%s: %s", fn, m);
  PyObject *e = named ? PyObject_CallFunctionObjArgs(type, named, NULL) : NULL;
  if (e && weft) { /* WeftError itself carries its status on the instance */
    PyObject *st = PyObject_GetAttrString(value, "status");
    if (!st || PyObject_SetAttrString(e, "status", st) < 0) Py_CLEAR(e);
    Py_XDECREF(st);
  }
  Py_XDECREF(named);
  Py_DECREF(msg);
  if (!e) { /* keep the original error */
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return;
  }
  if (tb) PyException_SetTraceback(e, tb);
  Py_XDECREF(tb);
  Py_XDECREF(value);
  PyErr_SetObject(type, e);
  Py_DECREF(type);
  Py_DECREF(e);
}

int wp_check_open(FabricObject *fo) {
  if (fo->f) return 0;
  wp_raise(WEFT_ERR_STATE, "this fabric is closed");
  return -1;
}

/* --------------------------------------------------------------------------------------------- parsing */

int wp_parse(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
             PyObject **out, int nmax, int nrequired) {
  for (int i = 0; i < nmax; i++) out[i] = NULL;
  if (nargs > nmax) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, nmax, nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
  if (kwnames) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nk; j++) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, j);
      int i = 0;
      for (; i < nmax; i++)
        if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) break;
      if (i == nmax) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
        return -1;
      }
      if (out[i]) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, names[i]);
        return -1;
      }
      out[i] = args[nargs + j];
    }
  }
  for (int i = 0; i < nrequired; i++)
    if (!out[i]) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return -1;
    }
  return 0;
}

int wp_contract(PyObject *o, int *out) {
  if (!o || o == Py_None) {
    *out = 0;
    return 0;
  }
  if (PyUnicode_Check(o)) {
    for (int i = 0; i < 4; i++)
      if (o == contract_str[i] || PyUnicode_Compare(o, contract_str[i]) == 0) {
        *out = i;
        return 0;
      }
  } else if (PyLong_Check(o) && !PyBool_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v >= 0 && v < 4) {
      *out = (int)v;
      return 0;
    }
    PyErr_Clear();
  }
  PyObject *r = PyObject_Repr(o); /* said as repr() would: 'fast' */
  if (!PyUnicode_Check(o) && !(PyLong_Check(o) && !PyBool_Check(o))) /* of the wrong type: a TypeError */
    PyErr_Format(PyExc_TypeError, "contract must be a contract's name (exact, fp32, tf32, bf16) or index, not %s",
                 r ? PyUnicode_AsUTF8(r) : "?");
  else
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "unknown contract %s; weft knows exact, fp32, tf32, bf16",
             r ? PyUnicode_AsUTF8(r) : "?");
  Py_XDECREF(r);
  return -1;
}

int wp_lane(FabricObject *fo, PyObject *o, int *out) {
  if (!o || o == Py_None) {
    *out = WEFT_LANE_AUTO;
    return 0;
  }
  if (PyUnicode_Check(o)) {
    PyObject *i = PyDict_GetItemWithError(fo->lane_index, o);
    if (i) {
      *out = (int)PyLong_AsLong(i);
      return 0;
    }
    if (PyErr_Occurred() || wp_check_open(fo)) return -1;
    size_t idx = 0;
    weft_status st = weft_fabric_lane_find(fo->f, PyUnicode_AsUTF8(o), &idx);
    if (st) {
      wp_raise_fabric(fo, st);
      return -1;
    }
    *out = (int)idx;
    return 0;
  }
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    Py_ssize_t n = PyTuple_GET_SIZE(fo->lane_names);
    if (overflow || v < 0 || v >= n) {
      PyErr_Clear();
      PyObject *r = PyObject_Repr(o); /* the number given, not what C made of it */
      wp_raise(WEFT_ERR_NOT_FOUND, "lane %s does not exist (the fabric has %zd lanes)", r ? PyUnicode_AsUTF8(r) : "?",
               n);
      Py_XDECREF(r);
      return -1;
    }
    *out = (int)v;
    return 0;
  }
  PyObject *r = PyObject_Repr(o);
  PyErr_Format(PyExc_TypeError, "lane must be a lane name (str) or index (int), not %s", r ? PyUnicode_AsUTF8(r) : "?");
  Py_XDECREF(r);
  return -1;
}

/* A flag (trans_a, copy, loss, ...): anything with a truth value but an array of one or more dimensions (numpy
 * raises ValueError for several elements, and deprecates the truth of none): a TypeError naming the flag. */
static int as_bool(PyObject *o, int dflt, const char *fn, const char *name) {
  if (!o) return dflt;
  int v = PyArray_Check(o) && PyArray_NDIM((PyArrayObject *)o) > 0 ? -1 : PyObject_IsTrue(o);
  if (v < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be True or False, not %s", fn, name, Py_TYPE(o)->tp_name);
  }
  return v;
}

/* ------------------------------------------------------------------------------------------- helpers */

PyObject *wp_shape_tuple(int ndim, const int64_t *dims) {
  PyObject *t = PyTuple_New(ndim);
  if (!t) return NULL;
  for (int i = 0; i < ndim; i++) {
    PyObject *v = PyLong_FromLongLong(dims[i]);
    if (!v) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

const char *wp_fmt_shape(char *buf, size_t len, int ndim, const int64_t *dims) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, len - o, "(");
  for (int i = 0; i < ndim && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)dims[i]);
  if (o < len) snprintf(buf + o, len - o, ndim == 1 ? ",)" : ")");
  return buf;
}

static const char *fmt_npshape(char *buf, size_t len, int ndim, const npy_intp *d) {
  int64_t dims[NPY_MAXDIMS];
  for (int i = 0; i < ndim; i++) dims[i] = d[i];
  return wp_fmt_shape(buf, len, ndim, dims);
}

/* ------------------------------------------------------------------------------------------- scratch */

weft_tensor *wp_scratch_get(FabricObject *fo, int pos, int ndim, const int64_t *dims) {
  wp_scratch *free_slot = NULL, *oldest = NULL;
  for (int i = 0; i < WP_SCRATCH_MAX; i++) {
    wp_scratch *s = &fo->scratch[i];
    if (!s->used) {
      if (!free_slot) free_slot = s;
      continue;
    }
    if (s->pos == pos && s->ndim == ndim && memcmp(s->dims, dims, (size_t)ndim * sizeof *dims) == 0) {
      s->stamp = ++fo->stamp;
      return s->h;
    }
    if (!oldest || s->stamp < oldest->stamp) oldest = s;
  }
  weft_tensor *h = NULL;
  weft_status st = weft_tensor_create(fo->f, ndim, dims, NULL, &h);
  if (st) {
    wp_raise_fabric(fo, st);
    return NULL;
  }
  wp_scratch *s = free_slot;
  if (!s) { /* full: the least recently used goes (no op holds it: slots are only evicted between ops) */
    s = oldest;
    weft_tensor_destroy(s->h);
    fo->scratch_bytes -= s->bytes;
  }
  s->used = 1, s->pos = pos, s->ndim = ndim;
  memset(s->dims, 0, sizeof s->dims);
  memcpy(s->dims, dims, (size_t)ndim * sizeof *dims);
  s->h = h;
  s->bytes = weft_tensor_numel(h) * 4;
  s->stamp = ++fo->stamp;
  fo->scratch_bytes += s->bytes;
  return h;
}

/* After an op: drop least recently used scratch tensors beyond the budget. */
void wp_scratch_trim(FabricObject *fo) {
  while (fo->scratch_bytes > fo->scratch_budget) {
    wp_scratch *oldest = NULL;
    for (int i = 0; i < WP_SCRATCH_MAX; i++)
      if (fo->scratch[i].used && (!oldest || fo->scratch[i].stamp < oldest->stamp)) oldest = &fo->scratch[i];
    if (!oldest) break;
    weft_tensor_destroy(oldest->h);
    fo->scratch_bytes -= oldest->bytes;
    oldest->used = 0;
  }
}

static void scratch_clear(FabricObject *fo) {
  for (int i = 0; i < WP_SCRATCH_MAX; i++)
    if (fo->scratch[i].used) {
      if (fo->f) weft_tensor_destroy(fo->scratch[i].h);
      fo->scratch[i].used = 0;
    }
  fo->scratch_bytes = 0;
}

/* ------------------------------------------------------------------------------------- array operands */

/* One operand of an op as the library gets it. */
typedef struct {
  TensorObject *t;     /* a Tensor operand (borrowed) */
  TensorObject *tmp;   /* a materialised view of it (new reference), or NULL */
  PyArrayObject *arr;  /* an array operand (new reference) */
  weft_tensor *h;      /* the handle given to the library */
  weft_tensor *wrap;   /* a per-call wrap of arr's memory, destroyed after the op */
  int nd;              /* the Python-visible rank and shape */
  int64_t d[NPY_MAXDIMS];
  int layout_trans;    /* arr's memory is the C-order array of its last two axes swapped */
  int reshaped;        /* t's handle was relabelled for the op; restore to t's own dims */
  int hnd;             /* the handle's shape before a relabel */
  int64_t hd[WEFT_MAX_DIMS];
  const char *fn, *name; /* for messages */
  int keep_view;         /* matmul: a .T view goes in as its base, transposed */
} opnd;

static void opnd_release(FabricObject *fo, opnd *o) {
  if (o->reshaped && o->h) weft_tensor_reshape(o->h, o->hnd, o->hd);
  if (o->wrap && fo->f) weft_tensor_destroy(o->wrap);
  Py_XDECREF(o->tmp);
  Py_XDECREF(o->arr);
  memset(o, 0, sizeof *o);
}

static const char *dtype_name(PyArrayObject *a, char *buf, size_t len) {
  PyObject *s = PyObject_Str((PyObject *)PyArray_DESCR(a));
  snprintf(buf, len, "%s", s ? PyUnicode_AsUTF8(s) : "?");
  Py_XDECREF(s);
  PyErr_Clear();
  return buf;
}

/* `x` as a float32 ndarray (new reference): float32 as it is; another real dtype converted only when
 * `convert` (dtype=numpy.float32 was passed), else TypeError saying how. */
PyArrayObject *wp_as_f32(FabricObject *fo, PyObject *x, const char *fn, const char *name, int convert) {
  PyArrayObject *a;
  if (PyArray_Check(x)) {
    Py_INCREF(x);
    a = (PyArrayObject *)x;
  } else {
    a = (PyArrayObject *)PyArray_FromAny(x, NULL, 0, 0, 0, NULL);
    if (!a) return NULL;
  }
  int type = PyArray_TYPE(a);
  if (type == NPY_FLOAT32 && PyArray_ISNOTSWAPPED(a)) return a;
  if (type == NPY_FLOAT32) {
    /* float32 in the other byte order ('>f4' here): the same values, so no dtype= is asked for, but the
     * library reads native floats: a copy in native order (counted), never the bytes as they are */
    PyArrayObject *c = (PyArrayObject *)PyArray_FromAny((PyObject *)a, PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
                                                        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
    Py_DECREF(a);
    if (c && fo) fo->copies++;
    return c;
  }
  char dn[64];
  char kind = PyArray_DESCR(a)->kind;
  if (!strchr("biuf", kind)) {
    PyErr_Format(PyExc_TypeError, "%s: %s has dtype %s; weft computes in float32 and takes real numbers only", fn,
                 name, dtype_name(a, dn, sizeof dn));
    Py_DECREF(a);
    return NULL;
  }
  if (convert <= 0) {
    PyErr_Format(PyExc_TypeError,
                 "%s: %s has dtype %s, and weft computes in float32 without converting silently: convert it first "
                 "(.astype(numpy.float32))%s",
                 fn, name, dtype_name(a, dn, sizeof dn),
                 convert < 0 ? ""
                 : kind == 'f' ? ", or pass dtype=numpy.float32 to have weft convert it (rounding to nearest)"
                               : ", or pass dtype=numpy.float32 to have weft convert it (integers beyond 2**24 round)");
    Py_DECREF(a);
    return NULL;
  }
  PyArrayObject *c = (PyArrayObject *)PyArray_FromAny((PyObject *)a, PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
                                                      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST,
                                                      NULL);
  Py_DECREF(a);
  if (c && fo) fo->copies++;
  return c;
}

/* Is arr the C-order array of its last two axes swapped (a Fortran-order matrix, x.swapaxes(-1, -2) of a
 * C-contiguous x)? Dimensions of extent 1 match any stride. */
static int swapped_contiguous(PyArrayObject *a) {
  int nd = PyArray_NDIM(a);
  if (nd < 2 || !PyArray_ISALIGNED(a)) return 0;
  const npy_intp *d = PyArray_DIMS(a), *s = PyArray_STRIDES(a);
  npy_intp want = 4;
  /* memory order: axis nd-2 fastest, then nd-1, then the batch axes from the last to the first */
  int order[NPY_MAXDIMS];
  int k = 0;
  order[k++] = nd - 2;
  order[k++] = nd - 1;
  for (int i = nd - 3; i >= 0; i--) order[k++] = i;
  for (int j = 0; j < nd; j++) {
    int ax = order[j];
    if (d[ax] != 1 && s[ax] != want) return 0;
    want *= d[ax];
  }
  return 1;
}

/* Fills o from x: a Tensor of this fabric, or an array (converted as as_f32 says). Layout: C-contiguous
 * arrays as they are; with allow_trans, a swapped-last-two layout too (o->layout_trans); any other layout
 * is copied (counted in fabric.copies), or refused when copy_ok is 0. */
static int opnd_take(FabricObject *fo, PyObject *x, const char *fn, const char *name, int convert, int copy_ok,
                     int allow_trans, opnd *o) {
  memset(o, 0, sizeof *o);
  o->fn = fn, o->name = name;
  o->keep_view = allow_trans;
  if (WP_IS_TENSOR(x)) {
    TensorObject *t = (TensorObject *)x;
    if (t->fab != fo) {
      wp_raise(WEFT_ERR_WRONG_FABRIC, "%s: %s belongs to another fabric; tensors cannot be shared between fabrics", fn,
               name);
      return -1;
    }
    o->t = t;
    o->nd = t->ndim;
    for (int i = 0; i < t->ndim; i++) o->d[i] = t->dims[i];
    return 0;
  }
  if (!copy_ok && convert > 0 && PyArray_Check(x) && PyArray_TYPE((PyArrayObject *)x) != NPY_FLOAT32 &&
      PyArray_SIZE((PyArrayObject *)x) > 0 && strchr("biuf", PyArray_DESCR((PyArrayObject *)x)->kind)) {
    char dn[64];
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s, so dtype=numpy.float32 converts it into a copy, and "
             "copy=False forbids that: pass %s.astype(numpy.float32), or leave copy unset", fn, name,
             dtype_name((PyArrayObject *)x, dn, sizeof dn), name);
    return -1;
  }
  if (!copy_ok && PyArray_Check(x) && PyArray_TYPE((PyArrayObject *)x) == NPY_FLOAT32 &&
      !PyArray_ISNOTSWAPPED((PyArrayObject *)x) && PyArray_SIZE((PyArrayObject *)x) > 0) {
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s: %s is float32 in the other byte order, so weft would have to copy it into "
             "native order, and copy=False forbids that: pass %s.astype(numpy.float32), or leave copy unset", fn, name,
             name);
    return -1;
  }
  PyArrayObject *a = wp_as_f32(fo, x, fn, name, convert);
  if (!a) return -1;
  o->arr = a;
  o->nd = PyArray_NDIM(a);
  for (int i = 0; i < o->nd; i++) o->d[i] = PyArray_DIMS(a)[i];
  if (PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a)) return 0;
  if (allow_trans && swapped_contiguous(a)) {
    o->layout_trans = 1;
    return 0;
  }
  if (PyArray_SIZE(a) == 0) return 0;
  if (!copy_ok) {
    char sb[128];
    int aligned = PyArray_ISALIGNED(a); /* contiguous but misaligned memory is copied too */
    wp_raise(WEFT_ERR_INVALID_ARGUMENT,
                 "%s: %s (shape %s) is %s in memory, so weft would have to copy it, and copy=False "
                 "forbids that: pass %s%s%s, or leave copy unset",
                 fn, name, fmt_npshape(sb, sizeof sb, o->nd, PyArray_DIMS(a)),
                 aligned ? "not contiguous" : "not aligned for float32", aligned ? "numpy.ascontiguousarray(" : "",
                 name, aligned ? ")" : ".copy()");
    return -1;
  }
  PyArrayObject *c = (PyArrayObject *)PyArray_NewCopy(a, NPY_CORDER);
  if (!c) return -1;
  Py_DECREF(a);
  o->arr = c;
  fo->copies++;
  return 0;
}

/* Gives the library a handle for o, shaped `nd`/`dims` (the array's memory in that shape, or the tensor
 * relabelled to it for the op). pos picks the scratch slot. */
static int opnd_bind(FabricObject *fo, opnd *o, int pos, int nd, const int64_t *dims) {
  if (o->t) {
    if (!(o->t->base ? o->t->base : o->t)->h)
      return wp_raise(WEFT_ERR_STATE, "%s: %s is a closed tensor", o->fn, o->name), -1;
    if (o->t->trans && !o->tmp && !o->keep_view) { /* a view other than matmul's operands: made real on its lane */
      weft_tensor *h = NULL;
      if (wp_tensor_materialize(o->t, &h, &o->tmp)) return -1;
      o->h = h;
    } else {
      o->h = wp_tensor_handle(o->tmp ? o->tmp : o->t->base ? o->t->base : o->t);
      if (!o->h) return -1;
      if (wp_tensor_before_use(o->t->base ? o->t->base : o->t)) return -1;
    }
    int hnd;
    int64_t hd[WEFT_MAX_DIMS];
    weft_tensor_shape(o->h, &hnd, hd);
    if (hnd != nd || memcmp(hd, dims, (size_t)nd * sizeof *dims) != 0) {
      weft_status st = weft_tensor_reshape(o->h, nd, dims);
      if (st) {
        wp_raise_fabric(fo, st);
        return -1;
      }
      o->reshaped = 1;
      o->hnd = hnd;
      memcpy(o->hd, hd, sizeof hd);
    }
    return 0;
  }
  size_t n = (size_t)PyArray_SIZE(o->arr);
  float *data = (float *)PyArray_DATA(o->arr);
  weft_status st;
  if (n >= WP_WRAP_MIN) {
    st = weft_tensor_wrap(fo->f, nd, dims, data, &o->wrap);
    if (st) return wp_raise_fabric(fo, st), -1;
    o->h = o->wrap;
    return 0;
  }
  o->h = wp_scratch_get(fo, pos, nd, dims);
  if (!o->h) return -1;
  st = weft_tensor_write(o->h, data, n);
  if (st) return wp_raise_fabric(fo, st), -1;
  return 0;
}

/* The bytes an array's elements span, [*lo, *hi) (empty for an empty array). */
static void array_extent(PyArrayObject *a, const char **lo, const char **hi) {
  const char *p = PyArray_BYTES(a), *q = p;
  if (PyArray_SIZE(a) == 0) {
    *lo = *hi = p;
    return;
  }
  for (int i = 0; i < PyArray_NDIM(a); i++) {
    npy_intp span = PyArray_STRIDES(a)[i] * (PyArray_DIMS(a)[i] - 1);
    if (span < 0) p += span;
    else q += span;
  }
  *lo = p;
  *hi = q + PyArray_ITEMSIZE(a);
}

/* Whether the library would see o over memory that the array `out` may also cover: an array operand it wraps
 * (a small one is copied into a scratch tensor first), or a tensor sharing host memory (DLPack). The library
 * refuses two handles over one buffer, so such an out= gets its result in memory of weft's own first, then
 * copied in, as numpy buffers an output that overlaps an input. */
static int out_overlaps(PyObject *out, const opnd *o) {
  if (!out || !PyArray_Check(out)) return 0;
  const char *lo, *hi, *olo, *ohi;
  if (o->wrap) {
    array_extent(o->arr, &lo, &hi);
  } else if (o->t && (o->t->base ? o->t->base : o->t)->shared && o->h) {
    lo = (const char *)(o->t->base ? o->t->base : o->t)->shared;
    hi = lo + 4 * weft_tensor_numel(o->h);
  } else
    return 0;
  array_extent((PyArrayObject *)out, &olo, &ohi);
  return lo < ohi && olo < hi;
}

/* [*lo, *hi): the host memory the library will use in place for o, before it is bound: an array it will wrap
 * (WP_WRAP_MIN elements or more), or a tensor's memory shared through DLPack. 0 when there is none. */
static int inplace_extent(const opnd *o, const char **lo, const char **hi) {
  if (o->arr) {
    if ((size_t)PyArray_SIZE(o->arr) < WP_WRAP_MIN) return 0;
    array_extent(o->arr, lo, hi);
    return 1;
  }
  const TensorObject *w = o->t ? (o->t->base ? o->t->base : o->t) : NULL;
  if (!w || !w->shared) return 0;
  size_t n = 1;
  for (int i = 0; i < w->ndim; i++) n *= (size_t)w->dims[i];
  *lo = (const char *)w->shared;
  *hi = *lo + 4 * n;
  return 1;
}

/* An operand the library would read in place over the memory an op writes in place (`target`: an out= or
 * axpy's y, a tensor sharing memory or a wrapped array) is read from a copy instead (counted): the library
 * refuses two handles over one buffer. An array is copied; a tensor sharing host memory becomes an array
 * copy of it (that memory is its value); a .T view of one is left to the library's refusal. */
static int opnd_unshare(FabricObject *fo, opnd *o, const opnd *target) {
  const char *lo, *hi, *tlo, *thi;
  if (!inplace_extent(o, &lo, &hi) || !inplace_extent(target, &tlo, &thi) || !(lo < thi && tlo < hi)) return 0;
  PyArrayObject *c;
  if (o->arr) {
    c = (PyArrayObject *)PyArray_NewCopy(o->arr, NPY_CORDER);
  } else {
    if (o->t->trans) return 0;
    npy_intp d[WEFT_MAX_DIMS];
    for (int i = 0; i < o->nd; i++) d[i] = (npy_intp)o->d[i];
    c = (PyArrayObject *)PyArray_SimpleNew(o->nd, d, NPY_FLOAT32);
    if (c) memcpy(PyArray_DATA(c), lo, (size_t)(hi - lo));
  }
  if (!c) return -1;
  Py_XSETREF(o->arr, c);
  o->t = NULL;
  o->layout_trans = 0;
  fo->copies++;
  return 0;
}

/* ---------------------------------------------------------------------------------------------- results */

/* Where an op's result goes: a new Tensor (any Tensor operand), the caller's out= (Tensor or ndarray) or a new
 * ndarray. */
typedef struct {
  TensorObject *t;     /* result tensor (new reference) or out tensor (borrowed via holder) */
  PyArrayObject *arr;  /* result array (new reference) */
  weft_tensor *h;
  weft_tensor *wrap;
  int reshaped, hnd;
  int64_t hd[WEFT_MAX_DIMS];
  int is_out;
} result;

static void result_release(FabricObject *fo, result *r) {
  if (r->reshaped && r->h) weft_tensor_reshape(r->h, r->hnd, r->hd);
  if (r->wrap && fo->f) weft_tensor_destroy(r->wrap);
  Py_XDECREF(r->t);
  Py_XDECREF(r->arr);
  memset(r, 0, sizeof *r);
}

/* Checks an out= for a result of Python shape (pnd, pd): a Tensor of this fabric of that shape (not a .T view),
 * or a writable C-contiguous aligned float32 ndarray in native byte order of that shape. */
static int out_check(FabricObject *fo, PyObject *out, const char *fn, const char *outname, int pnd,
                     const int64_t *pd) {
  char s1[128], s2[128];
  if (WP_IS_TENSOR(out)) {
    TensorObject *t = (TensorObject *)out;
    if (t->fab != fo)
      return wp_raise(WEFT_ERR_WRONG_FABRIC, "%s: %s belongs to another fabric; tensors cannot be shared between "
                      "fabrics", fn, outname), -1;
    if (t->trans)
      return PyErr_Format(PyExc_TypeError, "%s: %s is a view (.T); give a tensor of its own", fn, outname), -1;
    if (t->ndim != pnd || memcmp(t->dims, pd, (size_t)pnd * sizeof *pd) != 0)
      return wp_raise(WEFT_ERR_SHAPE, "%s: %s has shape %s; the result has shape %s", fn, outname,
                      wp_fmt_shape(s1, sizeof s1, t->ndim, t->dims), wp_fmt_shape(s2, sizeof s2, pnd, pd)), -1;
    return 0;
  }
  if (!PyArray_Check(out) || PyArray_TYPE((PyArrayObject *)out) != NPY_FLOAT32 ||
      !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)out) || !PyArray_ISWRITEABLE((PyArrayObject *)out) ||
      !PyArray_ISALIGNED((PyArrayObject *)out) || !PyArray_ISNOTSWAPPED((PyArrayObject *)out))
    return PyErr_Format(PyExc_TypeError, "%s: %s must be a Tensor of this fabric or a writable C-contiguous "
                        "float32 ndarray in native byte order", fn, outname), -1;
  PyArrayObject *oa = (PyArrayObject *)out;
  int ok = PyArray_NDIM(oa) == pnd;
  for (int i = 0; ok && i < pnd; i++) ok = PyArray_DIMS(oa)[i] == pd[i];
  if (!ok)
    return wp_raise(WEFT_ERR_SHAPE, "%s: %s has shape %s; the result has shape %s", fn, outname,
                    fmt_npshape(s1, sizeof s1, PyArray_NDIM(oa), PyArray_DIMS(oa)),
                    wp_fmt_shape(s2, sizeof s2, pnd, pd)), -1;
  return 0;
}

/* Sets an out= (checked by out_check) to zeros: the empty sums of a matmul with k = 0, sum_rows over no rows.
 * A tensor's value is written, not computed from the old one (0 * NaN is NaN). */
static int out_zero(FabricObject *fo, PyObject *out) {
  if (!WP_IS_TENSOR(out)) {
    memset(PyArray_DATA((PyArrayObject *)out), 0, (size_t)PyArray_NBYTES((PyArrayObject *)out));
    return 0;
  }
  TensorObject *t = (TensorObject *)out;
  weft_tensor *h = wp_tensor_handle(t);
  if (!h) return -1;
  size_t n = weft_tensor_numel(h);
  if (n == 0) return 0;
  float *zeros = calloc(n, sizeof *zeros);
  if (!zeros) return PyErr_NoMemory(), -1;
  weft_status st = weft_tensor_write(h, zeros, n);
  free(zeros);
  if (st) return wp_raise_fabric(fo, st), -1;
  return wp_tensor_after_write(t);
}

/* A new tensor of zeros of Python shape (pnd, pd) for an empty op's result, or a ShapeError that says which
 * shapes a tensor can hold (only the batch dimensions of a rank-3 or rank-4 tensor may be 0). */
static PyObject *zeros_result(FabricObject *fo, const char *fn, int pnd, const int64_t *pd, int contract) {
  int64_t d[WEFT_MAX_DIMS] = {1};
  int nd = pnd ? pnd : 1;
  char sb[160];
  int ok = pnd <= WEFT_MAX_DIMS;
  for (int i = 0; ok && i < pnd; i++) {
    d[i] = pd[i];
    if (pd[i] == 0 && (pnd < 3 || i >= pnd - 2)) ok = 0;
  }
  if (!ok)
    return wp_raise(WEFT_ERR_SHAPE, "%s: the result has shape %s, which a weft tensor cannot hold (its dimensions are "
                    ">= 1, but for the batch dimensions of a rank-3 or rank-4 tensor): give arrays for an empty array",
                    fn, wp_fmt_shape(sb, sizeof sb, pnd, pd));
  weft_tensor *h = NULL;
  weft_status st = weft_tensor_create(fo->f, nd, d, NULL, &h);
  if (st) return wp_raise_fabric(fo, st);
  PyObject *t = (PyObject *)wp_tensor_new(fo, h, pnd, pd, contract);
  if (!t) weft_tensor_destroy(h);
  return t;
}

/* Prepares r for a result of Python shape (pnd, pd) held by the library as (nd, dims). `own`: out= overlaps
 * an operand the library reads in place, so the result goes to a tensor of weft's own first (counted in
 * copies), and is copied into out after the op. */
static int result_prepare(FabricObject *fo, result *r, PyObject *out, int resident, int contract, int pos,
                          const char *fn, const char *outname, int pnd, const int64_t *pd, int nd,
                          const int64_t *dims, int own) {
  memset(r, 0, sizeof *r);
  if (out && out != Py_None) {
    r->is_out = 1;
    if (out_check(fo, out, fn, outname, pnd, pd)) return -1;
    if (WP_IS_TENSOR(out)) {
      TensorObject *t = (TensorObject *)out;
      r->h = wp_tensor_handle(t);
      if (!r->h) return -1;
      if (wp_tensor_before_use(t)) return -1;
      Py_INCREF(t);
      r->t = t;
      int hnd;
      int64_t hd[WEFT_MAX_DIMS];
      weft_tensor_shape(r->h, &hnd, hd);
      if (hnd != nd || memcmp(hd, dims, (size_t)nd * sizeof *dims) != 0) {
        weft_status st = weft_tensor_reshape(r->h, nd, dims);
        if (st) return wp_raise_fabric(fo, st), -1;
        r->reshaped = 1, r->hnd = hnd;
        memcpy(r->hd, hd, sizeof hd);
      }
      return 0;
    }
    Py_INCREF(out);
    r->arr = (PyArrayObject *)out;
  } else if (resident) {
    weft_tensor *h = NULL;
    weft_status st = weft_tensor_create(fo->f, nd, dims, NULL, &h);
    if (st) return wp_raise_fabric(fo, st), -1;
    r->t = wp_tensor_new(fo, h, pnd, pd, contract);
    if (!r->t) return weft_tensor_destroy(h), -1;
    r->h = h;
    /* the relabel to the Python shape happens in result_finish */
    return 0;
  } else {
    npy_intp d[NPY_MAXDIMS];
    for (int i = 0; i < pnd; i++) d[i] = (npy_intp)pd[i];
    r->arr = (PyArrayObject *)PyArray_SimpleNew(pnd, d, NPY_FLOAT32);
    if (!r->arr) return -1;
  }
  size_t n = (size_t)PyArray_SIZE(r->arr);
  if (n >= WP_WRAP_MIN) {
    weft_status st = own ? weft_tensor_create(fo->f, nd, dims, NULL, &r->wrap)
                         : weft_tensor_wrap(fo->f, nd, dims, (float *)PyArray_DATA(r->arr), &r->wrap);
    if (st) return wp_raise_fabric(fo, st), -1;
    if (own) fo->copies++;
    r->h = r->wrap;
  } else {
    r->h = wp_scratch_get(fo, pos, nd, dims);
    if (!r->h) return -1;
  }
  return 0;
}

/* After the op ran: the value into the array, the tensor relabelled to its Python shape. Returns a new
 * reference to what the op returns. */
static PyObject *result_finish(FabricObject *fo, result *r, int scalar) {
  weft_status st;
  if (r->arr) {
    size_t n = (size_t)PyArray_SIZE(r->arr);
    if (n >= WP_WRAP_MIN) {
      Py_BEGIN_ALLOW_THREADS st = weft_tensor_read(r->h, (float *)PyArray_DATA(r->arr), n);
      Py_END_ALLOW_THREADS
    } else
      st = weft_tensor_read(r->h, (float *)PyArray_DATA(r->arr), n);
    if (st) return wp_raise_fabric(fo, st);
    if (scalar && !r->is_out) return PyArray_Scalar(PyArray_DATA(r->arr), PyArray_DESCR(r->arr), (PyObject *)r->arr);
    Py_INCREF(r->arr);
    return (PyObject *)r->arr;
  }
  TensorObject *t = r->t;
  if (!r->is_out) {
    int hnd;
    int64_t hd[WEFT_MAX_DIMS], want[WEFT_MAX_DIMS];
    int wnd = t->ndim ? t->ndim : 1;
    for (int i = 0; i < wnd; i++) want[i] = t->ndim ? t->dims[i] : 1;
    weft_tensor_shape(r->h, &hnd, hd);
    if (hnd != wnd || memcmp(hd, want, (size_t)wnd * sizeof *want) != 0) {
      st = weft_tensor_reshape(r->h, wnd, want);
      if (st) return wp_raise_fabric(fo, st);
    }
  } else {
    if (r->reshaped) {
      weft_tensor_reshape(r->h, r->hnd, r->hd);
      r->reshaped = 0;
    }
    if (wp_tensor_after_write(t)) return NULL;
  }
  Py_INCREF(t);
  return (PyObject *)t;
}

/* --------------------------------------------------------------------------------------------- matmul */

static void strip_ones(int *nd, int64_t *d) {
  int s = 0;
  while (s < *nd && d[s] == 1) s++;
  memmove(d, d + s, (size_t)(*nd - s) * sizeof *d);
  *nd -= s;
}

static int64_t prod(int nd, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < nd; i++) p *= d[i];
  return p;
}

/* numpy.matmul's rules over weft_op_matmul. The caller holds the fabric lock. */
static PyObject *matmul_locked(FabricObject *fo, PyObject *a, PyObject *b, int contract, int lane, int trans_a,
                               int trans_b, PyObject *out, int convert, int copy_ok, const char *fn, const char *na,
                               const char *nb, int ta_given, int tb_given) {
  opnd A, B;
  result R;
  memset(&A, 0, sizeof A), memset(&B, 0, sizeof B), memset(&R, 0, sizeof R);
  weft_tensor *tmpR = NULL;
  int tmpR_scratch = 0;
  PyObject *ret = NULL;
  char s1[160], s2[160];
  if (wp_check_open(fo)) return NULL;
  if (opnd_take(fo, a, fn, na, convert, copy_ok, 1, &A) || opnd_take(fo, b, fn, nb, convert, copy_ok, 1, &B))
    goto done;
  if (A.nd == 0 || B.nd == 0) {
    wp_raise(WEFT_ERR_SHAPE, "%s: %s is a scalar (0-d); matmul needs operands with at least one dimension "
                 "(multiply by a scalar with *)", fn, A.nd == 0 ? na : nb);
    goto done;
  }
  /* op(x): the user's transposition, then 1-D promotion */
  int64_t sa[NPY_MAXDIMS + 1], sb[NPY_MAXDIMS + 1];
  int nda = A.nd, ndb = B.nd;
  memcpy(sa, A.d, (size_t)nda * sizeof *sa);
  memcpy(sb, B.d, (size_t)ndb * sizeof *sb);
  int a1 = nda == 1, b1 = ndb == 1;
  if (trans_a && nda >= 2) { int64_t t = sa[nda - 1]; sa[nda - 1] = sa[nda - 2]; sa[nda - 2] = t; }
  if (trans_b && ndb >= 2) { int64_t t = sb[ndb - 1]; sb[ndb - 1] = sb[ndb - 2]; sb[ndb - 2] = t; }
  if (a1) sa[1] = sa[0], sa[0] = 1, nda = 2;
  if (b1) sb[1] = 1, ndb = 2;
  int64_t m = sa[nda - 2], k = sa[nda - 1], kb = sb[ndb - 2], n = sb[ndb - 1];
  if (k != kb) {
    char tr[64] = ""; /* the transpositions asked for, and only those */
    (void)ta_given, (void)tb_given;
    if (trans_a || trans_b)
      snprintf(tr, sizeof tr, " (with %s%s%s)", trans_a ? "trans_a" : "", trans_a && trans_b ? " and " : "",
               trans_b ? "trans_b" : "");
    wp_raise(WEFT_ERR_SHAPE, "%s: the inner dimensions differ: %s is %s and %s is %s%s; %s's last dimension (%lld) "
             "must equal %s's %s (%lld)", fn, na, wp_fmt_shape(s1, sizeof s1, A.nd, A.d), nb,
             wp_fmt_shape(s2, sizeof s2, B.nd, B.d), tr, na, (long long)k, nb,
             b1 ? "only dimension" : "second-to-last", (long long)kb);
    goto done;
  }
  /* batch dimensions, broadcast as numpy does */
  int nba = nda - 2, nbb = ndb - 2, nbr = nba > nbb ? nba : nbb;
  int64_t br[NPY_MAXDIMS];
  for (int i = 0; i < nbr; i++) {
    int ia = i - (nbr - nba), ib = i - (nbr - nbb);
    int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
    if (x != y && x != 1 && y != 1) {
      wp_raise(WEFT_ERR_SHAPE, "%s: the batch dimensions of %s %s and %s %s do not broadcast", fn, na,
               wp_fmt_shape(s1, sizeof s1, A.nd, A.d), nb, wp_fmt_shape(s2, sizeof s2, B.nd, B.d));
      goto done;
    }
    br[i] = x == 1 ? y : x;
  }
  /* the result's Python shape */
  int64_t pd[NPY_MAXDIMS + 2];
  int pnd = 0;
  for (int i = 0; i < nbr; i++) pd[pnd++] = br[i];
  if (!a1) pd[pnd++] = m;
  if (!b1) pd[pnd++] = n;
  int resident = A.t || B.t;
  if (resident && pnd > WEFT_MAX_DIMS) {
    wp_raise(WEFT_ERR_SHAPE, "%s: the result would have shape %s, and a weft tensor has at most %d dimensions", fn,
             wp_fmt_shape(s1, sizeof s1, pnd, pd), WEFT_MAX_DIMS);
    goto done;
  }
  /* empty results, and k = 0 (every element an empty sum: zero), as numpy */
  if (prod(nbr, br) == 0 || m == 0 || n == 0 || k == 0) {
    if (out && out != Py_None) {
      if (out_check(fo, out, fn, "out", pnd, pd) || out_zero(fo, out)) goto done;
      ret = Py_NewRef(out);
      goto done;
    }
    if (resident) {
      ret = zeros_result(fo, fn, pnd, pd, contract);
      goto done;
    }
    npy_intp d[NPY_MAXDIMS];
    for (int i = 0; i < pnd; i++) d[i] = (npy_intp)pd[i];
    ret = PyArray_ZEROS(pnd, d, NPY_FLOAT32, 0);
    if (ret && pnd == 0) {
      PyObject *s = PyArray_Scalar(PyArray_DATA((PyArrayObject *)ret), PyArray_DESCR((PyArrayObject *)ret), ret);
      Py_DECREF(ret);
      ret = s;
    }
    goto done;
  }
  /* Plans. Batch dimensions lose their leading ones; `plain`: op(a) batched or not, b one matrix or a's batch;
   * `flipped`: a one matrix and b batched, computed as c^T = op(b)^T op(a)^T and permuted on the lane. A batch
   * that broadcasts only by repeating an operand is expanded here for arrays (a copy), refused for tensors. */
  int64_t ba[NPY_MAXDIMS], bb[NPY_MAXDIMS];
  int nba2 = nba, nbb2 = nbb;
  memcpy(ba, sa, (size_t)nba * sizeof *ba), memcpy(bb, sb, (size_t)nbb * sizeof *bb);
  strip_ones(&nba2, ba), strip_ones(&nbb2, bb);
  int same = nba2 == nbb2 && memcmp(ba, bb, (size_t)nba2 * sizeof *ba) == 0;
  int flipped = 0;
  if (nbb2 == 0 || same) {
  } else if (nba2 == 0) {
    flipped = 1;
  } else {
    if (A.t || B.t) {
      wp_raise(WEFT_ERR_SHAPE, "%s: the batch dimensions of %s %s and %s %s broadcast only by repeating one operand, "
               "which weft does not do for resident tensors: give both the same batch dimensions", fn, na,
               wp_fmt_shape(s1, sizeof s1, A.nd, A.d), nb, wp_fmt_shape(s2, sizeof s2, B.nd, B.d));
      goto done;
    }
    if (!copy_ok) {
      wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s: broadcasting the batch dimensions of %s %s and %s %s copies an operand, and "
                   "copy=False forbids that", fn, na, wp_fmt_shape(s1, sizeof s1, A.nd, A.d), nb,
                   wp_fmt_shape(s2, sizeof s2, B.nd, B.d));
      goto done;
    }
    /* expand both to the full batch (numpy.broadcast_to, then a C-order copy) and go again */
    npy_intp shp[NPY_MAXDIMS];
    PyObject *ea = NULL, *eb = NULL;
    for (int w = 0; w < 2; w++) {
      opnd *o = w ? &B : &A;
      int onda = o->nd;
      for (int i = 0; i < nbr; i++) shp[i] = (npy_intp)br[i];
      shp[nbr] = o->d[onda - 2], shp[nbr + 1] = o->d[onda - 1];
      PyObject *np = PyImport_ImportModule("numpy");
      PyObject *view = np ? PyObject_CallMethod(np, "broadcast_to", "(O N)", (PyObject *)o->arr,
                                                 PyArray_IntTupleFromIntp(nbr + 2, shp)) : NULL;
      Py_XDECREF(np);
      PyObject *c = view ? PyArray_NewCopy((PyArrayObject *)view, NPY_CORDER) : NULL;
      Py_XDECREF(view);
      if (!c) { Py_XDECREF(ea); goto done; }
      fo->copies++;
      if (w) eb = c; else ea = c;
    }
    ret = matmul_locked(fo, ea, eb, contract, lane, trans_a, trans_b, out, 0, 0, fn, na, nb, ta_given, tb_given);
    Py_DECREF(ea), Py_DECREF(eb);
    goto done;
  }
  /* the operands as the library gets them: memory shape and transposition */
  int64_t da[WEFT_MAX_DIMS + NPY_MAXDIMS], db[WEFT_MAX_DIMS + NPY_MAXDIMS], dc[WEFT_MAX_DIMS + NPY_MAXDIMS];
  int wa, wb, wc;
  int eff_ta = (trans_a && A.nd >= 2) ^ A.layout_trans ^ (A.t && A.t->trans);
  int eff_tb = (trans_b && B.nd >= 2) ^ B.layout_trans ^ (B.t && B.t->trans);
  if (b1) eff_tb = 1; /* a 1-D b as the row [1,k] transposed: the same relabel as a 1-D a (v @ v is one tensor) */
  /* memory rows/cols of each: op(x) = memory or memory^T */
  int64_t ar = eff_ta ? k : m, ac = eff_ta ? m : k, brr = eff_tb ? n : k, bc = eff_tb ? k : n;
  /* batch: a's (stripped) in the plain plan; b's in the flipped one; arrays with more than two batch
   * dimensions have them flattened into one (memory order is the same) */
  int64_t bat[NPY_MAXDIMS];
  int nbat = flipped ? nbb2 : nba2;
  memcpy(bat, flipped ? bb : ba, (size_t)nbat * sizeof *bat);
  if (nbat > 2) {
    bat[0] = prod(nbat, bat);
    nbat = 1;
  }
  if (!flipped) {
    wa = 0;
    for (int i = 0; i < nbat; i++) da[wa++] = bat[i];
    da[wa++] = ar, da[wa++] = ac;
    wb = 0;
    if (nbb2) for (int i = 0; i < nbat; i++) db[wb++] = bat[i];
    db[wb++] = brr, db[wb++] = bc;
    wc = 0;
    for (int i = 0; i < nbat; i++) dc[wc++] = bat[i];
    dc[wc++] = m, dc[wc++] = n;
  } else {
    wb = 0;
    for (int i = 0; i < nbat; i++) db[wb++] = bat[i];
    db[wb++] = brr, db[wb++] = bc;
    wa = 0;
    da[wa++] = ar, da[wa++] = ac;
    wc = 0;
    for (int i = 0; i < nbat; i++) dc[wc++] = bat[i];
    dc[wc++] = m, dc[wc++] = n;
  }
  if (out && WP_IS_TENSOR(out)) { /* a tensor out= sharing an operand's memory */
    opnd T = {.t = (TensorObject *)out};
    if (opnd_unshare(fo, &A, &T) || opnd_unshare(fo, &B, &T)) goto done;
  }
  if (opnd_bind(fo, &A, 0, wa, da) || opnd_bind(fo, &B, 1, wb, db)) goto done;
  if (result_prepare(fo, &R, out, resident, contract, 2, fn, "out", pnd, pd, wc, dc,
                     out_overlaps(out, &A) || out_overlaps(out, &B)))
    goto done;
  weft_op_desc desc = {(weft_contract)contract, lane};
  weft_status st;
  int big = (double)m * (double)n * (double)k * (double)prod(nbat, bat) >= (double)(1 << 21);
  if (!flipped) {
    if (big) {
      Py_BEGIN_ALLOW_THREADS st = weft_op_matmul(fo->f, &desc, A.h, eff_ta, B.h, eff_tb, R.h);
      Py_END_ALLOW_THREADS
    } else
      st = weft_op_matmul(fo->f, &desc, A.h, eff_ta, B.h, eff_tb, R.h);
    if (st) { wp_raise_fabric(fo, st); goto done; }
  } else {
    int64_t dt[WEFT_MAX_DIMS];
    int wt = 0;
    for (int i = 0; i < nbat; i++) dt[wt++] = bat[i];
    dt[wt++] = n, dt[wt++] = m;
    if ((size_t)prod(wt, dt) < WP_WRAP_MIN) {
      tmpR = wp_scratch_get(fo, 3, wt, dt);
      tmpR_scratch = 1;
      if (!tmpR) goto done;
    } else if ((st = weft_tensor_create(fo->f, wt, dt, NULL, &tmpR))) {
      wp_raise_fabric(fo, st);
      goto done;
    }
    Py_BEGIN_ALLOW_THREADS st = weft_op_matmul(fo->f, &desc, B.h, !eff_tb, A.h, !eff_ta, tmpR);
    if (!st) {
      int perm[WEFT_MAX_DIMS];
      for (int i = 0; i < wt; i++) perm[i] = i;
      perm[wt - 1] = wt - 2, perm[wt - 2] = wt - 1;
      /* the axis swap runs where the matmul was pinned (a bit copy: any contract gives the same bits); routed
       * only when that lane does not offer permute */
      weft_op_desc pdesc = {WEFT_CONTRACT_EXACT, desc.lane};
      st = weft_op_permute(fo->f, &pdesc, tmpR, perm, R.h);
      if (st == WEFT_ERR_UNSUPPORTED && desc.lane != WEFT_LANE_AUTO) {
        pdesc.lane = WEFT_LANE_AUTO;
        st = weft_op_permute(fo->f, &pdesc, tmpR, perm, R.h);
      }
    }
    Py_END_ALLOW_THREADS
    if (st) { wp_raise_fabric(fo, st); goto done; }
  }
  ret = result_finish(fo, &R, pnd == 0);
done:
  opnd_release(fo, &A);
  opnd_release(fo, &B);
  result_release(fo, &R);
  if (tmpR && !tmpR_scratch && fo->f) weft_tensor_destroy(tmpR);
  if (fo->f && fo->scratch_bytes > fo->scratch_budget) wp_scratch_trim(fo);
  return ret;
}

PyObject *wp_matmul_impl(FabricObject *fo, PyObject *a, PyObject *b, int contract, int lane, int trans_a,
                         int trans_b, PyObject *out, int convert, int copy_ok, const char *fn, const char *na,
                         const char *nb, int ta_given, int tb_given) {
  wp_lock(fo);
  PyObject *r = matmul_locked(fo, a, b, contract, lane, trans_a, trans_b, out, convert, copy_ok, fn, na, nb,
                              ta_given, tb_given);
  wp_unlock(fo);
  return r;
}

/* dtype=: None, or float32 (anything numpy reads as float32) to convert other real dtypes. */
static int parse_dtype(PyObject *o, int *convert) {
  *convert = 0;
  if (!o || o == Py_None) return 0;
  PyArray_Descr *d = NULL;
  if (!PyArray_DescrConverter(o, &d)) return -1;
  int ok = d->type_num == NPY_FLOAT32;
  Py_DECREF(d);
  if (!ok) {
    PyObject *r = PyObject_Repr(o);
    PyErr_Format(PyExc_TypeError, "dtype=%s: weft computes in float32 only; pass dtype=numpy.float32 or leave it out",
                 r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    return -1;
  }
  *convert = 1;
  return 0;
}

static int parse_copy(PyObject *o, int *copy_ok) {
  *copy_ok = 1;
  if (!o || o == Py_None) return 0;
  int v = as_bool(o, 1, "matmul", "copy");
  if (v < 0) return -1;
  *copy_ok = v;
  return 0;
}

static PyObject *Fabric_matmul(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"a", "b", "contract", "trans_a", "trans_b", "lane", "out", "dtype", "copy"};
  PyObject *v[9];
  if (wp_parse("matmul", args, nargs, kwnames, names, v, 9, 2)) return NULL;
  int contract, lane, convert, copy_ok;
  int ta = as_bool(v[3], 0, "matmul", "trans_a"), tb = ta < 0 ? 0 : as_bool(v[4], 0, "matmul", "trans_b");
  if (ta < 0 || tb < 0 || wp_contract(v[2], &contract) || wp_lane(fo, v[5], &lane) || parse_dtype(v[7], &convert) ||
      parse_copy(v[8], &copy_ok))
    return NULL;
  return wp_matmul_impl(fo, v[0], v[1], contract, lane, ta, tb, v[6], convert, copy_ok, "matmul", "a", "b",
                        v[3] != NULL, v[4] != NULL);
}

/* ----------------------------------------------------------------------------------- the elementwise ops */

/* Library shape of an elementwise operand: an array of any rank as [rows, cols] (leading dimensions are rows,
 * as the library counts them), 1-D as it is, a scalar as [1]; a tensor as it is. */
static void ew_dims(const opnd *o, int *nd, int64_t *d) {
  if (o->t) {
    *nd = 0;
    return; /* keep the handle's own shape */
  }
  if (o->nd <= 1) {
    *nd = 1;
    d[0] = o->nd ? o->d[0] : 1;
  } else {
    *nd = 2;
    d[0] = prod(o->nd - 1, o->d);
    d[1] = o->d[o->nd - 1];
  }
}

/* Binds an elementwise operand. An array of a tensor operand's shape (`peer`) is given in that shape, as the
 * library wants operands of one shape; otherwise as ew_dims says. */
static int ew_bind(FabricObject *fo, opnd *o, int pos, const opnd *peer) {
  int nd;
  int64_t d[WEFT_MAX_DIMS];
  ew_dims(o, &nd, d);
  if (!o->t && peer && peer->t && peer->nd == o->nd && memcmp(peer->d, o->d, (size_t)o->nd * sizeof *o->d) == 0) {
    nd = o->nd ? o->nd : 1;
    for (int i = 0; i < nd; i++) d[i] = o->nd ? o->d[i] : 1;
  }
  if (o->t) {
    if (!(o->t->base ? o->t->base : o->t)->h)
      return wp_raise(WEFT_ERR_STATE, "%s: %s is a closed tensor", o->fn, o->name), -1;
    weft_tensor *h0 = wp_tensor_handle(o->t->base ? o->t->base : o->t);
    if (!h0) return -1;
    weft_tensor_shape(h0, &nd, d);
    if (o->t->trans) { /* materialised: its shape is the view's */
      nd = o->t->ndim;
      memcpy(d, o->t->dims, (size_t)nd * sizeof *d);
    }
  }
  return opnd_bind(fo, o, pos, nd, d);
}

/* One elementwise op: x (and y) in, one result out. */
PyObject *wp_ew_op(FabricObject *fo, int kind, const char *fn, PyObject *x, const char *nx, PyObject *y,
                       const char *ny, float alpha, int contract, int lane, PyObject *out, int convert) {
  opnd X, Y;
  result R;
  memset(&X, 0, sizeof X), memset(&Y, 0, sizeof Y), memset(&R, 0, sizeof R);
  PyObject *ret = NULL;
  char s1[128], s2[128];
  wp_lock(fo);
  if (wp_check_open(fo)) goto done;
  if (opnd_take(fo, x, fn, nx, convert, 1, 0, &X)) goto done;
  if (y && opnd_take(fo, y, fn, ny, convert, 1, 0, &Y)) goto done;
  int resident = X.t || Y.t;
  /* Python shape of the result */
  int64_t pd[NPY_MAXDIMS];
  int pnd;
  if (kind == EW_SUM_ROWS) {
    pnd = 1;
    pd[0] = X.nd ? X.d[X.nd - 1] : 1;
  } else {
    pnd = X.nd;
    memcpy(pd, X.d, (size_t)pnd * sizeof *pd);
  }
  if (kind == EW_ADD || kind == EW_RELU_BW) {
    /* y is x's shape, or (add) one row of it: said here in Python's terms */
    int row = kind == EW_ADD && (Y.nd == 1 || (Y.nd == 2 && Y.d[0] == 1)) && X.nd >= 1 &&
              Y.d[Y.nd - 1] == X.d[X.nd - 1];
    int same = X.nd == Y.nd && memcmp(X.d, Y.d, (size_t)X.nd * sizeof *X.d) == 0;
    if (!same && !row) {
      wp_raise(WEFT_ERR_SHAPE, "%s: %s has shape %s and %s has shape %s; %s must have %s's shape%s", fn, nx,
               wp_fmt_shape(s1, sizeof s1, X.nd, X.d), ny, wp_fmt_shape(s2, sizeof s2, Y.nd, Y.d), ny, nx,
               kind == EW_ADD ? ", or be one row of it ([n] or [1, n]) added to every row" : "");
      goto done;
    }
    if (!same && Y.nd > X.nd) { /* [n] + [1, n] is [1, n], as numpy broadcasts it */
      pnd = Y.nd;
      memcpy(pd, Y.d, (size_t)pnd * sizeof *pd);
    }
  }
  int64_t n = prod(X.nd, X.d);
  if (n == 0) { /* empty in: nothing to run; sum_rows over no rows is zeros */
    if (out && out != Py_None) {
      if (out_check(fo, out, fn, "out", pnd, pd) || out_zero(fo, out)) goto done;
      ret = Py_NewRef(out);
      goto done;
    }
    if (resident) {
      ret = zeros_result(fo, fn, pnd, pd, contract);
      goto done;
    }
    npy_intp d[NPY_MAXDIMS];
    for (int i = 0; i < pnd; i++) d[i] = (npy_intp)pd[i];
    ret = PyArray_ZEROS(pnd, d, NPY_FLOAT32, 0);
    goto done;
  }
  if (out && WP_IS_TENSOR(out)) { /* a tensor out= sharing an operand's memory */
    opnd T = {.t = (TensorObject *)out};
    if (opnd_unshare(fo, &X, &T) || (y && opnd_unshare(fo, &Y, &T))) goto done;
  }
  if (ew_bind(fo, &X, 0, &Y)) goto done;
  if (y && ew_bind(fo, &Y, 1, &X)) goto done;
  int hnd;
  int64_t hd[WEFT_MAX_DIMS];
  weft_tensor_shape(X.h, &hnd, hd);
  if (kind == EW_SUM_ROWS) {
    hnd = 1;
    hd[0] = pd[0];
  }
  if (pnd > WEFT_MAX_DIMS && resident) {
    wp_raise(WEFT_ERR_SHAPE, "%s: a weft tensor has at most %d dimensions", fn, WEFT_MAX_DIMS);
    goto done;
  }
  if (result_prepare(fo, &R, out, resident, contract, 2, fn, "out", pnd, pd, hnd, hd,
                     out_overlaps(out, &X) || out_overlaps(out, &Y)))
    goto done;
  weft_op_desc desc = {(weft_contract)contract, lane};
  weft_status st;
  int big = n >= (1 << 20);
  PyThreadState *ts = big ? PyEval_SaveThread() : NULL;
  switch (kind) {
  case EW_ADD: st = weft_op_add(fo->f, &desc, X.h, Y.h, R.h); break;
  case EW_RELU: st = weft_op_relu(fo->f, &desc, X.h, R.h); break;
  case EW_RELU_BW: st = weft_op_relu_backward(fo->f, &desc, X.h, Y.h, R.h); break;
  case EW_SCALE: st = weft_op_scale(fo->f, &desc, alpha, X.h, R.h); break;
  default: st = weft_op_sum_rows(fo->f, &desc, X.h, R.h); break;
  }
  if (ts) PyEval_RestoreThread(ts);
  if (st) {
    wp_raise_fabric(fo, st);
    goto done;
  }
  ret = result_finish(fo, &R, pnd == 0);
done:
  opnd_release(fo, &X);
  opnd_release(fo, &Y);
  result_release(fo, &R);
  if (fo->f && fo->scratch_bytes > fo->scratch_budget) wp_scratch_trim(fo);
  wp_unlock(fo);
  return ret;
}

static int common_opts(FabricObject *fo, PyObject *c, PyObject *l, PyObject *dt, int *contract, int *lane,
                       int *convert) {
  return wp_contract(c, contract) || wp_lane(fo, l, lane) || parse_dtype(dt, convert) ? -1 : 0;
}

static PyObject *Fabric_add(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"x", "y", "contract", "lane", "out", "dtype"};
  PyObject *v[6];
  int c, l, cv;
  if (wp_parse("add", args, nargs, kw, names, v, 6, 2) || common_opts(fo, v[2], v[3], v[5], &c, &l, &cv)) return NULL;
  return wp_ew_op(fo, EW_ADD, "add", v[0], "x", v[1], "y", 0, c, l, v[4], cv);
}

static PyObject *Fabric_relu(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"x", "contract", "lane", "out", "dtype"};
  PyObject *v[5];
  int c, l, cv;
  if (wp_parse("relu", args, nargs, kw, names, v, 5, 1) || common_opts(fo, v[1], v[2], v[4], &c, &l, &cv)) return NULL;
  return wp_ew_op(fo, EW_RELU, "relu", v[0], "x", NULL, NULL, 0, c, l, v[3], cv);
}

static PyObject *Fabric_relu_backward(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"grad", "x", "contract", "lane", "out", "dtype"};
  PyObject *v[6];
  int c, l, cv;
  if (wp_parse("relu_backward", args, nargs, kw, names, v, 6, 2) || common_opts(fo, v[2], v[3], v[5], &c, &l, &cv))
    return NULL;
  return wp_ew_op(fo, EW_RELU_BW, "relu_backward", v[0], "grad", v[1], "x", 0, c, l, v[4], cv);
}

int wp_is_complex(PyObject *o) {
  return PyComplex_Check(o) || PyArray_IsScalar(o, ComplexFloating) ||
         (PyArray_Check(o) && PyArray_ISCOMPLEX((PyArrayObject *)o));
}

int wp_as_float(PyObject *o, const char *fn, const char *name, float *out) {
  /* numpy's complex scalars convert to float by dropping the imaginary part (a warning, not an error) */
  /* bools, timedeltas and datetimes convert too, but are not real numbers (the Tensor operators refuse them) */
  int not_real = wp_is_complex(o) || PyBool_Check(o) || PyArray_IsScalar(o, Bool) ||
                 PyArray_IsScalar(o, Timedelta) || PyArray_IsScalar(o, Datetime) ||
                 (PyArray_Check(o) && !strchr("iuf", PyArray_DESCR((PyArrayObject *)o)->kind));
  double d = not_real ? -1.0 : PyFloat_AsDouble(o);
  if (not_real || (d == -1.0 && PyErr_Occurred())) {
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) return -1; /* an int too large for C */
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a real number, not %s", fn, name, Py_TYPE(o)->tp_name);
    return -1;
  }
  *out = (float)d;
  return 0;
}

static PyObject *Fabric_scale(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"alpha", "x", "contract", "lane", "out", "dtype"};
  PyObject *v[6];
  int c, l, cv;
  float alpha;
  if (wp_parse("scale", args, nargs, kw, names, v, 6, 2) || wp_as_float(v[0], "scale", "alpha", &alpha) ||
      common_opts(fo, v[2], v[3], v[5], &c, &l, &cv))
    return NULL;
  return wp_ew_op(fo, EW_SCALE, "scale", v[1], "x", NULL, NULL, alpha, c, l, v[4], cv);
}

static PyObject *Fabric_sum_rows(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"x", "contract", "lane", "out", "dtype"};
  PyObject *v[5];
  int c, l, cv;
  if (wp_parse("sum_rows", args, nargs, kw, names, v, 5, 1) || common_opts(fo, v[1], v[2], v[4], &c, &l, &cv))
    return NULL;
  return wp_ew_op(fo, EW_SUM_ROWS, "sum_rows", v[0], "x", NULL, NULL, 0, c, l, v[3], cv);
}

/* y = alpha * x + y in place: y a Tensor, or a writable C-contiguous float32 array. */
static PyObject *Fabric_axpy(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"alpha", "x", "y", "contract", "lane", "dtype"};
  PyObject *v[6];
  int c, l, cv;
  float alpha;
  if (wp_parse("axpy", args, nargs, kw, names, v, 6, 3) || wp_as_float(v[0], "axpy", "alpha", &alpha) ||
      common_opts(fo, v[3], v[4], v[5], &c, &l, &cv))
    return NULL;
  PyObject *y = v[2];
  if (!WP_IS_TENSOR(y) &&
      !(PyArray_Check(y) && PyArray_TYPE((PyArrayObject *)y) == NPY_FLOAT32 &&
        PyArray_IS_C_CONTIGUOUS((PyArrayObject *)y) && PyArray_ISWRITEABLE((PyArrayObject *)y) &&
        PyArray_ISALIGNED((PyArrayObject *)y) && PyArray_ISNOTSWAPPED((PyArrayObject *)y)))
    return PyErr_Format(PyExc_TypeError, "axpy: y is updated in place, so it must be a Tensor or a writable, aligned "
                        "C-contiguous float32 ndarray in native byte order");
  if (WP_IS_TENSOR(y) && ((TensorObject *)y)->trans)
    return PyErr_Format(PyExc_TypeError, "axpy: y is a view (.T); give a tensor of its own");
  opnd X, Y;
  memset(&X, 0, sizeof X), memset(&Y, 0, sizeof Y);
  PyObject *ret = NULL;
  char s1[128], s2[128];
  wp_lock(fo);
  if (wp_check_open(fo) || opnd_take(fo, v[1], "axpy", "x", cv, 1, 0, &X) || opnd_take(fo, y, "axpy", "y", 0, 0, 0, &Y))
    goto done;
  if (prod(Y.nd, Y.d) == 0) {
    if (X.nd != Y.nd || memcmp(X.d, Y.d, (size_t)X.nd * sizeof *X.d) != 0) {
      wp_raise(WEFT_ERR_SHAPE, "axpy: x has shape %s and y has shape %s; they must be one shape",
               wp_fmt_shape(s1, sizeof s1, X.nd, X.d), wp_fmt_shape(s2, sizeof s2, Y.nd, Y.d));
      goto done;
    }
    ret = Py_NewRef(y);
    goto done;
  }
  /* x over y's memory (y itself, a view of it, a tensor sharing it): y is written while x is read */
  if (opnd_unshare(fo, &X, &Y)) goto done;
  if (ew_bind(fo, &X, 0, &Y) || ew_bind(fo, &Y, 1, &X)) goto done;
  weft_op_desc desc = {(weft_contract)c, l};
  weft_status st = weft_op_axpy(fo->f, &desc, alpha, X.h, Y.h);
  if (st) {
    wp_raise_fabric(fo, st);
    goto done;
  }
  if (Y.t) {
    if (wp_tensor_after_write(Y.t)) goto done;
  } else {
    size_t n = (size_t)PyArray_SIZE(Y.arr);
    if (!Y.wrap) st = weft_tensor_read(Y.h, (float *)PyArray_DATA(Y.arr), n);
    else {
      Py_BEGIN_ALLOW_THREADS st = weft_tensor_read(Y.h, (float *)PyArray_DATA(Y.arr), n);
      Py_END_ALLOW_THREADS
    }
    if (st) {
      wp_raise_fabric(fo, st);
      goto done;
    }
  }
  Py_INCREF(y);
  ret = y;
done:
  opnd_release(fo, &X);
  opnd_release(fo, &Y);
  if (fo->f && fo->scratch_bytes > fo->scratch_budget) wp_scratch_trim(fo);
  wp_unlock(fo);
  return ret;
}

/* (loss, grad) of softmax cross-entropy over rows. */
static PyObject *Fabric_softmax_xent(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"logits", "targets", "contract", "lane", "loss", "grad", "out_loss",
                                      "out_grad", "dtype"};
  PyObject *v[9];
  int c, l, cv;
  if (wp_parse("softmax_xent", args, nargs, kw, names, v, 9, 2) || common_opts(fo, v[2], v[3], v[8], &c, &l, &cv))
    return NULL;
  int want_loss = as_bool(v[4], 1, "softmax_xent", "loss");
  int want_grad = want_loss < 0 ? 0 : as_bool(v[5], 1, "softmax_xent", "grad");
  if (want_loss < 0 || want_grad < 0) return NULL;
  PyObject *ol = v[6] == Py_None ? NULL : v[6], *og = v[7] == Py_None ? NULL : v[7];
  if ((!want_loss && ol) || (!want_grad && og)) /* skipped, and yet given somewhere to go: which is meant? */
    return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "softmax_xent: %s=False skips what %s would hold; give one or the other",
                    !want_loss && ol ? "loss" : "grad", !want_loss && ol ? "out_loss" : "out_grad");
  if (!want_loss && !want_grad)
    return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "softmax_xent: loss=False and grad=False leave nothing to compute");
  opnd Z, T;
  result RL, RG;
  memset(&Z, 0, sizeof Z), memset(&T, 0, sizeof T), memset(&RL, 0, sizeof RL), memset(&RG, 0, sizeof RG);
  PyObject *ret = NULL, *rl = NULL, *rg = NULL;
  char s1[128], s2[128];
  wp_lock(fo);
  if (wp_check_open(fo) || opnd_take(fo, v[0], "softmax_xent", "logits", cv, 1, 0, &Z) ||
      opnd_take(fo, v[1], "softmax_xent", "targets", cv, 1, 0, &T))
    goto done;
  if (Z.nd != T.nd || memcmp(Z.d, T.d, (size_t)Z.nd * sizeof *Z.d) != 0) {
    wp_raise(WEFT_ERR_SHAPE, "softmax_xent: logits has shape %s and targets %s; they must be one shape",
             wp_fmt_shape(s1, sizeof s1, Z.nd, Z.d), wp_fmt_shape(s2, sizeof s2, T.nd, T.d));
    goto done;
  }
  if (prod(Z.nd, Z.d) == 0) {
    wp_raise(WEFT_ERR_SHAPE, "softmax_xent: logits has shape %s, which is empty: the loss is a mean over rows of "
             "a softmax over columns, and it needs at least one of each", wp_fmt_shape(s1, sizeof s1, Z.nd, Z.d));
    goto done;
  }
  if (og && WP_IS_TENSOR(og)) { /* a tensor out_grad sharing an operand's memory */
    opnd G = {.t = (TensorObject *)og};
    if (opnd_unshare(fo, &Z, &G) || opnd_unshare(fo, &T, &G)) goto done;
  }
  if (ew_bind(fo, &Z, 0, &T) || ew_bind(fo, &T, 1, &Z)) goto done;
  int resident = Z.t || T.t;
  int64_t one = 1;
  int hnd;
  int64_t hd[WEFT_MAX_DIMS];
  weft_tensor_shape(Z.h, &hnd, hd);
  if (want_loss && result_prepare(fo, &RL, ol, resident, c, 2, "softmax_xent", "out_loss", 1, &one, 1, &one, 0))
    goto done;
  if (want_grad && result_prepare(fo, &RG, og, resident, c, 3, "softmax_xent", "out_grad", Z.nd, Z.d, hnd, hd,
                                  out_overlaps(og, &Z) || out_overlaps(og, &T)))
    goto done;
  weft_op_desc desc = {(weft_contract)c, l};
  weft_status st = weft_op_softmax_xent(fo->f, &desc, Z.h, T.h, RL.h, RG.h);
  if (st) {
    wp_raise_fabric(fo, st);
    goto done;
  }
  if (want_loss) {
    rl = result_finish(fo, &RL, 0);
    if (!rl) goto done;
    if (!resident && !ol) { /* arrays: the loss as a numpy float32 */
      PyObject *s = PyArray_Scalar(PyArray_DATA((PyArrayObject *)rl), PyArray_DESCR((PyArrayObject *)rl), rl);
      Py_DECREF(rl);
      rl = s;
      if (!rl) goto done;
    }
  }
  if (want_grad && !(rg = result_finish(fo, &RG, 0))) goto done;
  ret = PyTuple_Pack(2, rl ? rl : Py_None, rg ? rg : Py_None);
done:
  Py_XDECREF(rl);
  Py_XDECREF(rg);
  opnd_release(fo, &Z);
  opnd_release(fo, &T);
  result_release(fo, &RL);
  result_release(fo, &RG);
  if (fo->f && fo->scratch_bytes > fo->scratch_budget) wp_scratch_trim(fo);
  wp_unlock(fo);
  return ret;
}

/* ------------------------------------------------------------------------------------------ tensors */

static int shape_arg(PyObject *o, const char *fn, int *nd, int64_t *d) {
  if (PyIndex_Check(o) && !(PyArray_Check(o) && PyArray_NDIM((PyArrayObject *)o) > 0)) {
    /* an int, or numpy's integer scalars, as numpy.zeros takes them (an array of ints is a sequence) */
    *nd = 1;
    d[0] = PyLong_AsLongLong(o);
    return PyErr_Occurred() ? -1 : 0;
  }
  PyObject *seq = PySequence_Fast(o, "shape must be an int or a sequence of ints");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > WEFT_MAX_DIMS) {
    Py_DECREF(seq);
    wp_raise(WEFT_ERR_SHAPE, "%s: a weft tensor has 0 to %d dimensions; shape has %zd", fn, WEFT_MAX_DIMS, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    d[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  *nd = (int)n;
  Py_DECREF(seq);
  return 0;
}

static PyObject *Fabric_zeros(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"shape", "contract"};
  PyObject *v[2];
  int nd, c;
  int64_t d[WEFT_MAX_DIMS];
  if (wp_parse("zeros", args, nargs, kw, names, v, 2, 1) || wp_contract(v[1], &c) || shape_arg(v[0], "zeros", &nd, d))
    return NULL;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_tensor *h = NULL;
    const int64_t one = 1; /* a 0-d tensor is one element in the library, as fabric.tensor makes it */
    weft_status st = weft_tensor_create(fo->f, nd ? nd : 1, nd ? d : &one, NULL, &h);
    if (st) { /* the library's reason, said by the call the caller made (not "tensor: ...") */
      const char *m = weft_fabric_last_error(fo->f), *colon = m ? strstr(m, ": ") : NULL;
      wp_raise(st, "zeros: %s", colon ? colon + 2 : weft_status_str(st));
    } else if (!(ret = (PyObject *)wp_tensor_new(fo, h, nd, d, c)))
      weft_tensor_destroy(h);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_tensor(FabricObject *fo, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
  static const char *const names[] = {"data", "contract", "dtype"};
  PyObject *v[3];
  int c, cv;
  if (wp_parse("tensor", args, nargs, kw, names, v, 3, 1) || wp_contract(v[1], &c) || parse_dtype(v[2], &cv))
    return NULL;
  if (WP_IS_TENSOR(v[0]))
    return PyErr_Format(PyExc_TypeError, "tensor: data is already a weft Tensor (use it as it is, or numpy() it)");
  PyArrayObject *a = wp_as_f32(fo, v[0], "tensor", "data", cv); /* a conversion is a copy, counted */
  if (!a) return NULL;
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) { /* so is a layout's, before the tensor's own */
    PyArrayObject *cpy = (PyArrayObject *)PyArray_NewCopy(a, NPY_CORDER);
    Py_DECREF(a);
    if (!(a = cpy)) return NULL;
    fo->copies++;
  }
  int nd = PyArray_NDIM(a);
  int64_t d[NPY_MAXDIMS];
  for (int i = 0; i < nd; i++) d[i] = PyArray_DIMS(a)[i];
  if (nd > WEFT_MAX_DIMS) {
    char sb[128];
    Py_DECREF(a);
    return wp_raise(WEFT_ERR_SHAPE, "tensor: data has shape %s; a weft tensor has at most %d dimensions",
                    wp_fmt_shape(sb, sizeof sb, nd, d), WEFT_MAX_DIMS);
  }
  int hnd = nd ? nd : 1;
  int64_t hd[WEFT_MAX_DIMS] = {1, 1, 1, 1};
  for (int i = 0; i < nd; i++) hd[i] = d[i];
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_tensor *h = NULL;
    weft_status st = weft_tensor_create(fo->f, hnd, hd, PyArray_SIZE(a) ? (const float *)PyArray_DATA(a) : NULL, &h);
    if (st) wp_raise_fabric(fo, st);
    else if (!(ret = (PyObject *)wp_tensor_new(fo, h, nd, d, c))) weft_tensor_destroy(h);
  }
  wp_unlock(fo);
  Py_DECREF(a);
  return ret;
}

/* ------------------------------------------------------------------------------------- fabric: lifetime */

static void note_trampoline(void *ctx, const char *line) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction((PyObject *)ctx, "s", line ? line : "");
  if (!r) PyErr_WriteUnraisable((PyObject *)ctx);
  Py_XDECREF(r);
  PyGILState_Release(g);
}

/* Without on_note, the notes a person should see (those beginning "weft: ": that routing started measuring
 * lanes and where the results are kept, a cache that could not be read or written) go to sys.stderr;
 * progress is silent. */
static void note_default(void *ctx, const char *line) {
  (void)ctx;
  if (!line || strncmp(line, "weft: ", 6) != 0) return;
  PyGILState_STATE g = PyGILState_Ensure();
  PySys_FormatStderr("%s\n", line);
  PyObject *err = PySys_GetObject("stderr");
  if (err) {
    PyObject *r = PyObject_CallMethod(err, "flush", NULL);
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
  }
  PyGILState_Release(g);
}

static PyObject *Fabric_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  (void)args, (void)kw;
  FabricObject *fo = (FabricObject *)type->tp_alloc(type, 0);
  if (!fo) return NULL;
  fo->lock = PyThread_allocate_lock();
  if (!fo->lock) {
    Py_DECREF(fo);
    return PyErr_NoMemory();
  }
  fo->lane_names = PyTuple_New(0);
  fo->lane_index = PyDict_New();
  fo->scratch_budget = 64u << 20;
  if (!fo->lane_names || !fo->lane_index) {
    Py_DECREF(fo);
    return NULL;
  }
  return (PyObject *)fo;
}

static const char *opt_str(PyObject *o, const char *fn, const char *name, const char *join, PyObject **keep) {
  *keep = NULL;
  if (!o || o == Py_None) return NULL;
  if (PyUnicode_Check(o)) return PyUnicode_AsUTF8(o);
  /* a sequence of names, joined */
  PyObject *sep = PyUnicode_FromString(join);
  if (!sep) return NULL;
  PyObject *s = PyUnicode_Join(sep, o);
  Py_DECREF(sep);
  if (!s) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a str or a sequence of str", fn, name);
    return NULL;
  }
  *keep = s;
  return PyUnicode_AsUTF8(s);
}

static int Fabric_init(FabricObject *fo, PyObject *args, PyObject *kw) {
  static char *names[] = {"lanes", "cpu_threads", "calibration", "on_note", "vulkan_max_binding", "scratch_bytes",
                          "plugins", "remote", "browser", NULL};
  PyObject *lanes = NULL, *cal = NULL, *on_note = NULL, *plugins = NULL, *remote = NULL, *browser = NULL;
  int cpu_threads = 0;
  long long vmax = 0, scratch = 64 << 20;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OiOOLLOOO:Fabric", names, &lanes, &cpu_threads, &cal, &on_note, &vmax,
                                   &scratch, &plugins, &remote, &browser))
    return -1;
  if (vmax < 0 || scratch < 0) {
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "Fabric: %s is %lld; give a byte count >= 0%s",
             vmax < 0 ? "vulkan_max_binding" : "scratch_bytes", vmax < 0 ? vmax : scratch,
             vmax < 0 ? " (0: the device's own limit)" : "");
    return -1;
  }
  if (fo->f) {
    PyErr_SetString(PyExc_RuntimeError, "Fabric.__init__: this fabric is already open");
    return -1;
  }
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  PyObject *k1, *k2, *k3, *k4;
  desc.lanes = opt_str(lanes, "Fabric", "lanes", ",", &k1);
  if (PyErr_Occurred()) return -1;
  desc.plugins = opt_str(plugins, "Fabric", "plugins", ":", &k2);
  if (PyErr_Occurred()) return Py_XDECREF(k1), -1;
  desc.remote = opt_str(remote, "Fabric", "remote", ",", &k3);
  desc.browser = opt_str(browser, "Fabric", "browser", ",", &k4);
  int rc = -1;
  if (PyErr_Occurred()) goto out;
  desc.cpu_threads = cpu_threads;
  desc.vulkan_max_binding = (uint64_t)vmax;
  if (!cal || cal == Py_None || (PyUnicode_Check(cal) && PyUnicode_CompareWithASCIIString(cal, "auto") == 0))
    desc.calibration = WEFT_CALIBRATION_AUTO;
  else if (PyUnicode_Check(cal) && PyUnicode_CompareWithASCIIString(cal, "force") == 0) desc.calibration = WEFT_CALIBRATION_FORCE;
  else if (PyUnicode_Check(cal) && PyUnicode_CompareWithASCIIString(cal, "off") == 0) desc.calibration = WEFT_CALIBRATION_OFF;
  else {
    PyObject *r = PyObject_Repr(cal);
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "unknown calibration %s; use one of auto, force, off", r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    goto out;
  }
  if (on_note && on_note != Py_None) {
    if (!PyCallable_Check(on_note)) {
      PyErr_SetString(PyExc_TypeError, "Fabric: on_note must be callable (it gets one str per note)");
      goto out;
    }
    Py_INCREF(on_note);
    Py_XSETREF(fo->on_note, on_note);
    desc.on_note = note_trampoline;
    desc.note_ctx = on_note;
  } else {
    desc.on_note = note_default;
  }
  fo->scratch_budget = (size_t)scratch;
  weft_fabric *f = NULL;
  weft_status st;
  char err[1024];
  Py_BEGIN_ALLOW_THREADS st = weft_fabric_open(&desc, &f);
  if (st) snprintf(err, sizeof err, "%s", weft_open_error());
  Py_END_ALLOW_THREADS
  if (st) {
    wp_raise_status(st, err);
    goto out;
  }
  fo->f = f;
  size_t n = weft_fabric_lane_count(f);
  PyObject *names_t = PyTuple_New((Py_ssize_t)n);
  if (!names_t) goto out;
  Py_XSETREF(fo->lane_names, names_t);
  PyDict_Clear(fo->lane_index);
  for (size_t i = 0; i < n; i++) {
    weft_lane_info info;
    PyObject *s = weft_fabric_lane_info(f, i, &info) == WEFT_OK ? PyUnicode_FromString(info.name) : PyUnicode_FromString("?");
    if (!s) goto out;
    PyTuple_SET_ITEM(names_t, (Py_ssize_t)i, s);
    PyObject *iv = PyLong_FromSize_t(i);
    if (!iv || PyDict_SetItem(fo->lane_index, s, iv)) { Py_XDECREF(iv); goto out; }
    Py_DECREF(iv);
  }
  rc = 0;
out:
  Py_XDECREF(k1), Py_XDECREF(k2), Py_XDECREF(k3), Py_XDECREF(k4);
  return rc;
}

static void fabric_close(FabricObject *fo) {
  wp_lock(fo);
  if (fo->f) {
    scratch_clear(fo);
    weft_fabric *f = fo->f;
    fo->f = NULL;
    Py_BEGIN_ALLOW_THREADS weft_fabric_close(f);
    Py_END_ALLOW_THREADS
  }
  wp_unlock(fo);
}

static PyObject *Fabric_close(FabricObject *fo, PyObject *unused) {
  (void)unused;
  fabric_close(fo);
  Py_RETURN_NONE;
}

static int Fabric_traverse(FabricObject *fo, visitproc visit, void *arg) {
  Py_VISIT(fo->on_note);
  return 0;
}

static int Fabric_clear(FabricObject *fo) {
  /* the library may still call on_note while open: it goes once the fabric is closed */
  if (!fo->f) Py_CLEAR(fo->on_note);
  return 0;
}

static void Fabric_dealloc(FabricObject *fo) {
  PyObject_GC_UnTrack(fo);
  if (fo->weakreflist) PyObject_ClearWeakRefs((PyObject *)fo);
  if (fo->lock) {
    fabric_close(fo);
    PyThread_free_lock(fo->lock);
  }
  Py_CLEAR(fo->on_note);
  Py_CLEAR(fo->lane_names);
  Py_CLEAR(fo->lane_index);
  /* a Python subclass's instance: subtype_dealloc drops the type's reference after this */
  Py_TYPE(fo)->tp_free((PyObject *)fo);
}

/* -------------------------------------------------------------------------- fabric: scopes, lanes, routing */

typedef weft_status (*fab_fn)(weft_fabric *);

static PyObject *call_blocking(FabricObject *fo, fab_fn fn) {
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_status st;
    Py_BEGIN_ALLOW_THREADS st = fn(fo->f);
    Py_END_ALLOW_THREADS
    if (st) wp_raise_fabric(fo, st);
    else ret = Py_NewRef(Py_None);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_scope_begin(FabricObject *fo, PyObject *u) { (void)u; return call_blocking(fo, weft_scope_begin); }
static PyObject *Fabric_scope_end(FabricObject *fo, PyObject *u) { (void)u; return call_blocking(fo, weft_scope_end); }
static PyObject *Fabric_sync(FabricObject *fo, PyObject *u) { (void)u; return call_blocking(fo, weft_fabric_sync); }
static PyObject *Fabric_calibrate(FabricObject *fo, PyObject *u) { (void)u; return call_blocking(fo, weft_fabric_calibrate); }
static PyObject *Fabric_calibration_wait(FabricObject *fo, PyObject *u) {
  (void)u;
  return call_blocking(fo, weft_fabric_calibration_wait);
}

static PyObject *Fabric_revive(FabricObject *fo, PyObject *u) {
  (void)u;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    size_t up = 0;
    weft_status st;
    Py_BEGIN_ALLOW_THREADS st = weft_fabric_revive(fo->f, &up);
    Py_END_ALLOW_THREADS
    ret = st ? wp_raise_fabric(fo, st) : PyLong_FromSize_t(up);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *str_or_empty(const char *s) { return PyUnicode_DecodeUTF8(s ? s : "", s ? (Py_ssize_t)strlen(s) : 0, "replace"); }

/* (name, kind, device, driver, details, contracts mask, failed, revivable, ops mask) per lane. */
static PyObject *Fabric_lane_infos(FabricObject *fo, PyObject *u) {
  (void)u;
  wp_lock(fo);
  PyObject *list = NULL;
  if (wp_check_open(fo)) goto done;
  size_t n = weft_fabric_lane_count(fo->f);
  list = PyList_New(0);
  for (size_t i = 0; list && i < n; i++) {
    weft_lane_info info;
    weft_status st = weft_fabric_lane_info(fo->f, i, &info);
    if (st) { Py_CLEAR(list); wp_raise_fabric(fo, st); break; }
    PyObject *row = Py_BuildValue("(NNNNNkiiK)", str_or_empty(info.name), str_or_empty(info.kind),
                                  str_or_empty(info.device), str_or_empty(info.driver), str_or_empty(info.details),
                                  (unsigned long)info.contracts, info.failed, info.revivable,
                                  (unsigned long long)info.ops);
    if (!row || PyList_Append(list, row)) { Py_XDECREF(row); Py_CLEAR(list); break; }
    Py_DECREF(row);
  }
done:
  wp_unlock(fo);
  return list;
}

static PyObject *Fabric_absent(FabricObject *fo, PyObject *u) {
  (void)u;
  wp_lock(fo);
  PyObject *list = NULL;
  if (wp_check_open(fo)) goto done;
  size_t n = weft_fabric_absent_count(fo->f);
  list = PyList_New(0);
  for (size_t i = 0; list && i < n; i++) {
    const char *name = NULL, *reason = NULL;
    if (weft_fabric_absent_info(fo->f, i, &name, &reason)) continue;
    PyObject *row = Py_BuildValue("(NN)", str_or_empty(name), str_or_empty(reason));
    if (!row || PyList_Append(list, row)) { Py_XDECREF(row); Py_CLEAR(list); break; }
    Py_DECREF(row);
  }
done:
  wp_unlock(fo);
  return list;
}

static PyObject *explanation(FabricObject *fo, const weft_route_explanation *e) {
  PyObject *lanes = PyList_New(0);
  for (size_t i = 0; lanes && i < e->nlanes; i++) {
    const weft_route_cost *c = &e->lanes[i];
    PyObject *row = Py_BuildValue("(NiNddddd)", str_or_empty(c->lane), c->eligible, str_or_empty(c->why_not), c->wait,
                                  c->transfer, c->alpha, c->compute, c->total);
    if (!row || PyList_Append(lanes, row)) { Py_XDECREF(row); Py_CLEAR(lanes); }
    else Py_DECREF(row);
  }
  (void)fo;
  if (!lanes) return NULL;
  return Py_BuildValue("(sidiN)", weft_op_kind_str(e->op), (int)e->contract, e->work, e->chosen, lanes);
}

static PyObject *Fabric_route_explain_raw(FabricObject *fo, PyObject *args) {
  weft_route_query q;
  memset(&q, 0, sizeof q);
  const char *op;
  int contract;
  long long batch, m, n, k, rows, cols;
  if (!PyArg_ParseTuple(args, "siLLLLLL", &op, &contract, &batch, &m, &n, &k, &rows, &cols)) return NULL;
  weft_op_kind kind;
  if (weft_op_kind_parse(op, &kind)) return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "unknown op '%s'", op);
  q.op = kind, q.contract = (weft_contract)contract;
  q.batch = batch, q.m = m, q.n = n, q.k = k, q.rows = rows, q.cols = cols;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_route_explanation e;
    weft_status st = weft_route_explain(fo->f, &q, &e);
    ret = st ? wp_raise_fabric(fo, st) : explanation(fo, &e);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_route_last_raw(FabricObject *fo, PyObject *u) {
  (void)u;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_route_explanation e;
    weft_status st = weft_route_last(fo->f, &e);
    ret = st ? wp_raise_fabric(fo, st) : explanation(fo, &e);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_cost_model_raw(FabricObject *fo, PyObject *args) {
  int lane, cls, contract;
  if (!PyArg_ParseTuple(args, "iii", &lane, &cls, &contract)) return NULL;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_cost_line line;
    weft_status st = weft_fabric_cost_model(fo->f, (size_t)lane, (weft_cost_class)cls, (weft_contract)contract, &line);
    ret = st ? wp_raise_fabric(fo, st) : Py_BuildValue("(dddii)", line.alpha, line.beta, line.refine, line.source, line.points);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_set_cost_model_raw(FabricObject *fo, PyObject *args) {
  int lane, cls, contract;
  double alpha, beta;
  if (!PyArg_ParseTuple(args, "iiidd", &lane, &cls, &contract, &alpha, &beta)) return NULL;
  wp_lock(fo);
  PyObject *ret = NULL;
  if (!wp_check_open(fo)) {
    weft_status st = weft_fabric_set_cost_model(fo->f, (size_t)lane, (weft_cost_class)cls, (weft_contract)contract, alpha, beta);
    ret = st ? wp_raise_fabric(fo, st) : Py_NewRef(Py_None);
  }
  wp_unlock(fo);
  return ret;
}

static PyObject *Fabric_lane_index_m(FabricObject *fo, PyObject *lane) {
  int i;
  if (wp_lane(fo, lane, &i)) return NULL;
  if (i < 0) return PyErr_Format(PyExc_TypeError, "lane_index: give a lane name or index");
  return PyLong_FromLong(i);
}

static PyObject *Fabric_get_lanes(FabricObject *fo, void *c) {
  (void)c;
  return PySequence_List(fo->lane_names);
}

static PyObject *Fabric_get_closed(FabricObject *fo, void *c) {
  (void)c;
  return PyBool_FromLong(fo->f == NULL);
}

static PyObject *Fabric_get_last_lane(FabricObject *fo, void *c) {
  (void)c;
  if (!fo->f) return wp_raise(WEFT_ERR_STATE, "last_lane: this fabric is closed");
  int i = weft_fabric_last_lane(fo->f);
  if (i < 0 || i >= PyTuple_GET_SIZE(fo->lane_names)) Py_RETURN_NONE;
  return Py_NewRef(PyTuple_GET_ITEM(fo->lane_names, i));
}

static PyObject *Fabric_get_copies(FabricObject *fo, void *c) {
  (void)c;
  return PyLong_FromSsize_t(fo->copies);
}

/* -------------------------------------------------------------- the C API side of the benchmarks */

/* Times `reps` calls of one op straight through weft.h on resident tensors (what a C program pays), for the
 * Python overhead figure: ("relu" | "add" | "matmul" | "matmul_host", x, y, reps). matmul_host is the C
 * program with host arrays: wrap (once) the caller's arrays, then per call write, matmul, read. Returns
 * seconds per call (the best of `runs` runs of reps, 5 unless given). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static PyObject *Fabric_bench_c(FabricObject *fo, PyObject *args) {
  const char *what;
  PyObject *x, *y;
  long reps;
  int contract = 0, lane = WEFT_LANE_AUTO, runs = 5;
  if (!PyArg_ParseTuple(args, "sOOl|iii", &what, &x, &y, &reps, &contract, &lane, &runs)) return NULL;
  if (wp_check_open(fo)) return NULL;
  weft_op_desc desc = {(weft_contract)contract, lane};
  double best = 1e30;
  weft_status st = WEFT_OK;
  if (strcmp(what, "matmul_host") == 0) {
    /* x, y: float32 C-contiguous [n,n] arrays; the C program keeps wrapped tensors over them and its output */
    if (!PyArray_Check(x) || !PyArray_Check(y)) return PyErr_Format(PyExc_TypeError, "arrays expected");
    PyArrayObject *A = (PyArrayObject *)x, *B = (PyArrayObject *)y;
    int64_t da[2] = {PyArray_DIMS(A)[0], PyArray_DIMS(A)[1]}, db[2] = {PyArray_DIMS(B)[0], PyArray_DIMS(B)[1]};
    int64_t dc[2] = {da[0], db[1]};
    size_t nc = (size_t)(dc[0] * dc[1]);
    float *c = malloc(nc * 4);
    weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    wp_lock(fo);
    Py_BEGIN_ALLOW_THREADS
    st = weft_tensor_wrap(fo->f, 2, da, PyArray_DATA(A), &ta);
    if (!st) st = weft_tensor_wrap(fo->f, 2, db, PyArray_DATA(B), &tb);
    if (!st) st = c ? weft_tensor_wrap(fo->f, 2, dc, c, &tc) : WEFT_ERR_OUT_OF_MEMORY;
    for (int r = 0; r < runs && !st; r++) {
      double t0 = now_s();
      for (long i = 0; i < reps && !st; i++) {
        st = weft_tensor_write(ta, PyArray_DATA(A), (size_t)PyArray_SIZE(A));
        if (!st) st = weft_tensor_write(tb, PyArray_DATA(B), (size_t)PyArray_SIZE(B));
        if (!st) st = weft_op_matmul(fo->f, &desc, ta, 0, tb, 0, tc);
        if (!st) st = weft_tensor_read(tc, c, nc);
      }
      double dt = (now_s() - t0) / (double)reps;
      if (dt < best) best = dt;
    }
    Py_END_ALLOW_THREADS
    if (st) wp_raise_fabric(fo, st);
    weft_tensor_destroy(ta), weft_tensor_destroy(tb), weft_tensor_destroy(tc);
    wp_unlock(fo);
    free(c);
    return st ? NULL : PyFloat_FromDouble(best);
  }
  if (!WP_IS_TENSOR(x) || !WP_IS_TENSOR(y)) return PyErr_Format(PyExc_TypeError, "tensors expected");
  weft_tensor *hx = wp_tensor_handle((TensorObject *)x), *hy = wp_tensor_handle((TensorObject *)y);
  if (!hx || !hy) return NULL;
  int kind = strcmp(what, "relu") == 0 ? 0 : strcmp(what, "add") == 0 ? 1 : strcmp(what, "matmul") == 0 ? 2 : -1;
  if (kind < 0) return PyErr_Format(PyExc_ValueError, "unknown op %s", what);
  wp_lock(fo);
  for (int r = 0; r < runs && !st; r++) {
    double t0 = now_s();
    for (long i = 0; i < reps && !st; i++) {
      /* as the Python call does: a new result tensor per op, destroyed when dropped */
      int nd;
      int64_t d[WEFT_MAX_DIMS];
      weft_tensor_shape(hx, &nd, d);
      if (kind == 2) d[nd - 1] = ((TensorObject *)y)->dims[((TensorObject *)y)->ndim - 1];
      weft_tensor *out = NULL;
      st = weft_tensor_create(fo->f, nd, d, NULL, &out);
      if (!st) st = kind == 0 ? weft_op_relu(fo->f, &desc, hx, out)
                    : kind == 1 ? weft_op_add(fo->f, &desc, hx, hy, out)
                                : weft_op_matmul(fo->f, &desc, hx, 0, hy, 0, out);
      weft_tensor_destroy(out);
    }
    double dt = (now_s() - t0) / (double)reps;
    if (dt < best) best = dt;
  }
  wp_unlock(fo);
  if (st) return wp_raise_fabric(fo, st);
  return PyFloat_FromDouble(best);
}

/* --------------------------------------------------------------------------------------------- the type */

WP_NAMED_FAST(FabricObject, Fabric_matmul, "matmul")
WP_NAMED_FAST(FabricObject, Fabric_add, "add")
WP_NAMED_FAST(FabricObject, Fabric_relu, "relu")
WP_NAMED_FAST(FabricObject, Fabric_relu_backward, "relu_backward")
WP_NAMED_FAST(FabricObject, Fabric_scale, "scale")
WP_NAMED_FAST(FabricObject, Fabric_axpy, "axpy")
WP_NAMED_FAST(FabricObject, Fabric_sum_rows, "sum_rows")
WP_NAMED_FAST(FabricObject, Fabric_softmax_xent, "softmax_xent")
WP_NAMED_FAST(FabricObject, Fabric_tensor, "tensor")
WP_NAMED_FAST(FabricObject, Fabric_zeros, "zeros")
WP_NAMED_1(FabricObject, Fabric_sync, "sync")
WP_NAMED_1(FabricObject, Fabric_calibrate, "calibrate")
WP_NAMED_1(FabricObject, Fabric_calibration_wait, "calibration_wait")
WP_NAMED_1(FabricObject, Fabric_revive, "revive")
WP_NAMED_1(FabricObject, Fabric_lane_index_m, "lane_index")
WP_NAMED_FAST(PyObject, wp_from_dlpack, "from_dlpack")
#define FAST (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef Fabric_methods[] = {
    {"close", (PyCFunction)Fabric_close, METH_NOARGS,
     "close()\n--\n\nCloses the fabric and every tensor on it. Calling it again does nothing."},
    {"matmul", (PyCFunction)(void (*)(void))Fabric_matmul_named, FAST,
     "matmul(a, b, contract='exact', trans_a=False, trans_b=False, lane=None, out=None, dtype=None, copy=None)\n--\n\n"
     "The matrix product as numpy.matmul computes it, on the lane the router chooses (or `lane`).\n\n"
     "a and b are float32 arrays (any array-like) or Tensors of this fabric. 1-D operands are promoted\n"
     "(a as a row, b as a column) and that dimension is removed from the result; batch dimensions\n"
     "broadcast. Arrays in: an ndarray out (a numpy float32 for two 1-D operands). Any Tensor operand:\n"
     "a Tensor out, left where it was computed. Empty operands give empty results, and an inner\n"
     "dimension of 0 gives zeros, as numpy does.\n\n"
     "contract: 'exact' (the canonical order: the same bits on every lane), 'fp32' (any order),\n"
     "'tf32'/'bf16' (tensor units, opt-in). trans_a/trans_b: use the operand's last two axes swapped.\n"
     "dtype=numpy.float32 converts other real dtypes (float64 rounds to nearest); without it such an\n"
     "input raises TypeError. Fortran-ordered and transposed operands are read where they are\n"
     "(no copy); other strided views are copied, counted in Fabric.copies, or refused with copy=False\n"
     "(as is a dtype= conversion). out: a Tensor (not a .T view) or a writable C-contiguous float32 ndarray of\n"
     "the result's shape; it may overlap a or b (the result then goes to weft's memory first, a counted copy)."},
    {"add", (PyCFunction)(void (*)(void))Fabric_add_named, FAST,
     "add(x, y, contract='exact', lane=None, out=None, dtype=None)\n--\n\n"
     "x + y, where y has x's shape or is one row ([n] or [1, n]) added to every row of x (a bias)."},
    {"relu", (PyCFunction)(void (*)(void))Fabric_relu_named, FAST,
     "relu(x, contract='exact', lane=None, out=None, dtype=None)\n--\n\nmax(x, 0) elementwise; a NaN stays NaN."},
    {"relu_backward", (PyCFunction)(void (*)(void))Fabric_relu_backward_named, FAST,
     "relu_backward(grad, x, contract='exact', lane=None, out=None, dtype=None)\n--\n\n"
     "grad where x > 0, else 0: the gradient through relu given the relu's input x."},
    {"scale", (PyCFunction)(void (*)(void))Fabric_scale_named, FAST,
     "scale(alpha, x, contract='exact', lane=None, out=None, dtype=None)\n--\n\nalpha * x (alpha rounded to float32)."},
    {"axpy", (PyCFunction)(void (*)(void))Fabric_axpy_named, FAST,
     "axpy(alpha, x, y, contract='exact', lane=None, dtype=None)\n--\n\n"
     "y = alpha * x + y in place (the product rounded, then the sum); returns y. y is a Tensor or a\n"
     "writable C-contiguous float32 ndarray."},
    {"sum_rows", (PyCFunction)(void (*)(void))Fabric_sum_rows_named, FAST,
     "sum_rows(x, contract='exact', lane=None, out=None, dtype=None)\n--\n\n"
     "The sum over rows (every leading dimension) of each column, rows ascending: shape (n,)."},
    {"softmax_xent", (PyCFunction)(void (*)(void))Fabric_softmax_xent_named, FAST,
     "softmax_xent(logits, targets, contract='exact', lane=None, loss=True, grad=True, out_loss=None, "
     "out_grad=None, dtype=None)\n--\n\n"
     "Softmax cross-entropy of logits [r, c] against target probabilities [r, c]: (loss, grad) with\n"
     "loss = mean over rows of -sum_j t*log_softmax(z) and grad = (softmax(z) - t) / r. With array\n"
     "operands loss is a numpy float32 and grad an ndarray; with a Tensor operand both are Tensors\n"
     "(loss of shape (1,)). loss=False or grad=False skips one (it comes back as None; not with out_loss or\n"
     "out_grad given for it: InvalidArgumentError)."},
    {"tensor", (PyCFunction)(void (*)(void))Fabric_tensor_named, FAST,
     "tensor(data, contract='exact', dtype=None)\n--\n\n"
     "A Tensor of this fabric holding a copy of `data` (float32; dtype=numpy.float32 converts other real\n"
     "dtypes). Its operators (@ + - *) run under `contract`. For memory shared with numpy or PyTorch,\n"
     "see weft.from_dlpack."},
    {"zeros", (PyCFunction)(void (*)(void))Fabric_zeros_named, FAST,
     "zeros(shape, contract='exact')\n--\n\nA Tensor of zeros of this shape (0 to 4 dimensions; () is a scalar)."},
    {"_scope_begin", (PyCFunction)Fabric_scope_begin, METH_NOARGS, NULL},
    {"_scope_end", (PyCFunction)Fabric_scope_end, METH_NOARGS, NULL},
    {"sync", (PyCFunction)Fabric_sync_named, METH_NOARGS, "sync()\n--\n\nWaits for every lane to finish what it was given."},
    {"calibrate", (PyCFunction)Fabric_calibrate_named, METH_NOARGS,
     "calibrate()\n--\n\nMeasures every live lane now and writes the cache (unless calibration is 'off')."},
    {"calibration_wait", (PyCFunction)Fabric_calibration_wait_named, METH_NOARGS,
     "calibration_wait()\n--\n\nWaits for the lanes being measured in the background (calibration 'auto': the first\n"
     "time routing chooses between lanes with no model) and measures any still without one, so routing from\n"
     "here on uses measured lines. Returns at once when every lane has one or calibration is 'off'."},
    {"revive", (PyCFunction)Fabric_revive_named, METH_NOARGS,
     "revive()\n--\n\nAsks every down lane that can come back whether it is up now; returns the number of lanes up."},
    {"_lane_infos", (PyCFunction)Fabric_lane_infos, METH_NOARGS, NULL},
    {"_absent", (PyCFunction)Fabric_absent, METH_NOARGS, NULL},
    {"_route_explain", (PyCFunction)Fabric_route_explain_raw, METH_VARARGS, NULL},
    {"_route_last", (PyCFunction)Fabric_route_last_raw, METH_NOARGS, NULL},
    {"_cost_model", (PyCFunction)Fabric_cost_model_raw, METH_VARARGS, NULL},
    {"_set_cost_model", (PyCFunction)Fabric_set_cost_model_raw, METH_VARARGS, NULL},
    {"_bench_c", (PyCFunction)Fabric_bench_c, METH_VARARGS, NULL},
    {"from_dlpack", (PyCFunction)(void (*)(void))wp_from_dlpack_named, FAST,
     "from_dlpack(x, contract='exact')\n--\n\n"
     "A Tensor of this fabric over the memory of `x` (anything with __dlpack__: a numpy array, a PyTorch\n"
     "tensor), with no copy: writes through either are seen by the other. float32 only; row-major (or\n"
     "a matrix's transpose, which comes in as a .T view). The memory must outlive nothing: the tensor\n"
     "keeps the producer's buffer alive. A Tensor of this fabric is returned as it is (a view of it if\n"
     "`contract` differs); one of another fabric is shared like any producer's memory."},
    {"lane_index", (PyCFunction)Fabric_lane_index_m_named, METH_O,
     "lane_index(lane)\n--\n\nThe index of a lane given by name ('cpu') or index; NotFoundError (with the names\n"
     "there are) if there is none."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Fabric_getset[] = {
    {"lanes", (getter)Fabric_get_lanes, NULL, "The names of the fabric's lanes, in index order.", NULL},
    {"closed", (getter)Fabric_get_closed, NULL, "True once close() was called.", NULL},
    {"last_lane", (getter)Fabric_get_last_lane, NULL, "The lane the last successful op ran on, or None.", NULL},
    {"copies", (getter)Fabric_get_copies, NULL,
     "How many array operands were copied for their layout or dtype (strided views, dtype= conversions,\n"
     "broadcast batch dimensions): the copies weft makes are counted, never silent.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static int Fabric_init_named(PyObject *self, PyObject *args, PyObject *kw) {
  int rc = Fabric_init((FabricObject *)self, args, kw);
  if (rc < 0) wp_name_error("Fabric");
  return rc;
}

PyTypeObject WP_FabricType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.Fabric",
    .tp_basicsize = sizeof(FabricObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native fabric: weft.Fabric is this type with the slower conveniences added in Python.",
    .tp_new = Fabric_new,
    .tp_init = Fabric_init_named,
    .tp_dealloc = (destructor)Fabric_dealloc,
    .tp_traverse = (traverseproc)Fabric_traverse,
    .tp_clear = (inquiry)Fabric_clear,
    .tp_methods = Fabric_methods,
    .tp_getset = Fabric_getset,
    .tp_weaklistoffset = offsetof(FabricObject, weakreflist),
};

/* ---------------------------------------------------------------------------------------------- module */

static PyObject *mod_set_errors(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *d, *base;
  if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &d, &base)) return NULL;
  Py_INCREF(d), Py_INCREF(base);
  Py_XSETREF(wp_errors, d);
  Py_XSETREF(wp_base_error, base);
  Py_RETURN_NONE;
}

static PyObject *mod_status_str(PyObject *self, PyObject *arg) {
  (void)self;
  long s = PyLong_AsLong(arg);
  if (s == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(weft_status_str((weft_status)s));
}

static PyObject *mod_expf(PyObject *self, PyObject *arg) {
  (void)self;
  float x;
  if (wp_as_float(arg, "expf", "x", &x)) return NULL;
  return PyFloat_FromDouble((double)weft_expf(x));
}

static PyObject *mod_logf(PyObject *self, PyObject *arg) {
  (void)self;
  float x;
  if (wp_as_float(arg, "logf", "x", &x)) return NULL;
  return PyFloat_FromDouble((double)weft_logf(x));
}

static PyObject *mod_cost_cache_path(PyObject *self, PyObject *u) {
  (void)self, (void)u;
  char buf[4096];
  weft_status st = weft_cost_cache_path(buf, sizeof buf);
  if (st) return wp_raise_status(st, "no home or cache directory is known (set XDG_CACHE_HOME or HOME)");
  return PyUnicode_FromString(buf);
}

static PyObject *mod_library_path(PyObject *self, PyObject *u) {
  (void)self, (void)u;
  Dl_info info;
  if (dladdr((void *)weft_version, &info) && info.dli_fname) return PyUnicode_DecodeFSDefault(info.dli_fname);
  Py_RETURN_NONE;
}

static PyObject *mod_op_names(PyObject *self, PyObject *u) {
  (void)self, (void)u;
  PyObject *t = PyTuple_New(WEFT_OP_COUNT);
  for (int i = 0; t && i < WEFT_OP_COUNT; i++) {
    PyObject *s = PyUnicode_FromString(weft_op_kind_str((weft_op_kind)i));
    if (!s) return Py_DECREF(t), NULL;
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

WP_NAMED_1(PyObject, mod_expf, "expf")
WP_NAMED_1(PyObject, mod_logf, "logf")

static PyMethodDef module_methods[] = {
    {"op_names", mod_op_names, METH_NOARGS, "op_names()\n--\n\nThe names of weft's ops, by op number."},
    {"_set_errors", mod_set_errors, METH_VARARGS, NULL},
    {"status_str", mod_status_str, METH_O, "status_str(status)\n--\n\nweft_status_str: a status code's short description."},
    {"expf", mod_expf_named, METH_O, "expf(x)\n--\n\nweft's exp (weft_expf): the same bits on every exact lane. x is rounded to float32 first."},
    {"logf", mod_logf_named, METH_O, "logf(x)\n--\n\nweft's log (weft_logf): the same bits on every exact lane."},
    {"cost_cache_path", mod_cost_cache_path, METH_NOARGS, "cost_cache_path()\n--\n\nThe calibration cache file weft reads and writes."},
    {"library_path", mod_library_path, METH_NOARGS, "library_path()\n--\n\nThe file of the weft library this module runs on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "weft._weft",
    "The native part of the weft package (CPython C API over weft.h). Use the weft package, not this module.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__weft(void) {
  import_array();
  for (int i = 0; i < 4; i++)
    if (!(contract_str[i] = PyUnicode_InternFromString(wp_contract_names[i]))) return NULL;
  if (PyType_Ready(&WP_FabricType) < 0 || PyType_Ready(&WP_TensorType) < 0 || PyType_Ready(&WP_GPTType) < 0)
    return NULL;
  /* numpy's binary operators defer to the Tensor's (array @ tensor runs on the fabric) */
  if (PyDict_SetItemString(WP_TensorType.tp_dict, "__array_ufunc__", Py_None) < 0) return NULL;
  PyType_Modified(&WP_TensorType);
  wp_dtype_f32 = (PyObject *)PyArray_DescrFromType(NPY_FLOAT32);
  wp_dtype_i32 = (PyObject *)PyArray_DescrFromType(NPY_INT32);
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&WP_FabricType), Py_INCREF(&WP_TensorType), Py_INCREF(&WP_GPTType);
  if (PyModule_AddObject(m, "Fabric", (PyObject *)&WP_FabricType) < 0 ||
      PyModule_AddObject(m, "Tensor", (PyObject *)&WP_TensorType) < 0 ||
      PyModule_AddObject(m, "GPT", (PyObject *)&WP_GPTType) < 0 ||
      PyModule_AddStringConstant(m, "library_version", weft_version()) < 0 ||
      PyModule_AddStringConstant(m, "header_version", WEFT_VERSION_STRING) < 0 ||
      PyModule_AddIntConstant(m, "MAX_DIMS", WEFT_MAX_DIMS) < 0 || PyModule_AddIntConstant(m, "WRAP_MIN", WP_WRAP_MIN) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
