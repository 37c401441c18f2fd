/* py_gpt.c - weft.GPT: GPT-2 (src/gpt, llm.c's model on weft's public API) resident on a fabric, driven with
 * numpy arrays: made from a seed, from a parameter array, from GPT-2 weights (safetensors or llm.c's .bin)
 * or from a weft checkpoint; a training step, the loss, logits, and generation with a KV cache. */
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "gpt/gpt.h"
#include "gpt/gpt_io.h"
#include "weftmodule.h"

typedef struct {
  PyObject_HEAD
  FabricObject *fab;
  weft_gpt *g;
} GPTObject;

static PyObject *gpt_error(GPTObject *self, weft_status st) { return wp_raise_status(st, weft_gpt_last_error(self->g)); }

static int gpt_live(GPTObject *self) {
  if (!self->g) return wp_raise(WEFT_ERR_STATE, "this model is closed"), -1;
  if (!self->fab->f) return wp_raise(WEFT_ERR_STATE, "this model's fabric is closed"), -1;
  return 0;
}

static int place_arg(PyObject *o, int *out) {
  static const char *const names[] = {"auto", "layers", "pinned", "rr"};
  if (!o || o == Py_None) return *out = WEFT_GPT_PLACE_AUTO, 0;
  for (int i = 0; i < 4; i++)
    if (PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, names[i]) == 0) return *out = i, 0;
  wp_raise(WEFT_ERR_INVALID_ARGUMENT, "unknown place; use one of auto, layers, pinned, rr");
  return -1;
}

/* The model on fo from params (count floats, or NULL: initialised from seed). */
static int gpt_make(GPTObject *self, FabricObject *fo, const weft_gpt_config *cfg, const float *params, uint64_t seed,
                    int place, int lane, int contract) {
  char err[256];
  if (!weft_gpt_config_ok(cfg, err, sizeof err)) return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "GPT: %s", err), -1;
  size_t count = weft_gpt_param_count(cfg);
  float *own = NULL;
  if (!params) {
    /* refused with its size before anything is allocated: where the kernel overcommits, malloc would succeed
     * and the initialisation meet the OOM killer */
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double need = 2.0 * (double)count * sizeof(float), have = (double)pages * (double)page;
    if (pages > 0 && page > 0 && need > have)
      return wp_raise(WEFT_ERR_OUT_OF_MEMORY, "GPT: a model of %d layers and %d channels has %zu parameters and needs about "
                      "%.1f GiB of memory; this machine has %.1f GiB", cfg->L, cfg->C, count, need / 1073741824.0,
                      have / 1073741824.0), -1;
    own = malloc(count * sizeof *own);
    if (!own)
      return wp_raise(WEFT_ERR_OUT_OF_MEMORY, "GPT: out of memory for %zu parameters (%.1f GiB)", count,
                      (double)count * sizeof(float) / 1073741824.0), -1;
    weft_gpt_init_params(cfg, seed, own);
    params = own;
  }
  weft_gpt_opts opts = {place, lane < 0 ? 0 : lane, (weft_contract)contract};
  weft_status st;
  weft_gpt *g = NULL;
  wp_lock(fo);
  if (wp_check_open(fo)) {
    wp_unlock(fo);
    free(own);
    return -1;
  }
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_create(fo->f, cfg, params, count, &opts, &g);
  Py_END_ALLOW_THREADS
  if (st) {
    wp_raise_status(st, g ? weft_gpt_last_error(g) : weft_fabric_last_error(fo->f));
    if (g) weft_gpt_destroy(g);
  }
  wp_unlock(fo);
  free(own);
  if (st) return -1;
  Py_INCREF(fo);
  Py_XSETREF(self->fab, fo);
  self->g = g;
  return 0;
}

/* A seed or rng_state (O& converter): a whole number from 0 to 2**64 - 1; "K" would wrap -1 or 2**70 silently,
 * so that load() gave back another number than save() was given. */
static int u64_arg(PyObject *o, void *out) {
  PyObject *i = PyNumber_Index(o);
  if (!i) return 0;
  unsigned long long v = PyLong_AsUnsignedLongLong(i);
  Py_DECREF(i);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_OverflowError, "seeds and rng_state are whole numbers from 0 to 2**64 - 1");
    }
    return 0;
  }
  *(unsigned long long *)out = v;
  return 1;
}

static int GPT_init(GPTObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"fabric", "L", "C", "NH", "V", "maxT", "params", "seed", "place", "lane", "contract", NULL};
  PyObject *fab, *params = NULL, *place = NULL, *lane = NULL, *contract = NULL;
  weft_gpt_config cfg;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!iiiii|OO&OOO:GPT", names, &WP_FabricType, &fab, &cfg.L, &cfg.C, &cfg.NH,
                                   &cfg.V, &cfg.maxT, &params, u64_arg, &seed, &place, &lane, &contract))
    return -1;
  if (self->g) return PyErr_SetString(PyExc_RuntimeError, "GPT.__init__: already made"), -1;
  FabricObject *fo = (FabricObject *)fab;
  int pl, ln, ct;
  if (place_arg(place, &pl) || wp_lane(fo, lane, &ln) || wp_contract(contract, &ct)) return -1;
  if (params && params != Py_None) {
    PyArrayObject *a = wp_as_f32(fo, params, "GPT", "params", -1); /* GPT takes no dtype= */
    if (!a) return -1;
    char err[256];
    if (!weft_gpt_config_ok(&cfg, err, sizeof err)) {
      Py_DECREF(a);
      return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "GPT: %s", err), -1;
    }
    size_t count = weft_gpt_param_count(&cfg);
    if ((size_t)PyArray_SIZE(a) != count) {
      Py_DECREF(a);
      return wp_raise(WEFT_ERR_SHAPE, "GPT: params holds %zd floats; this configuration has %zu (llm.c's order)",
                      PyArray_SIZE(a), count), -1;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) { /* read in C order, as numpy.ravel would */
      PyArrayObject *c = (PyArrayObject *)PyArray_NewCopy(a, NPY_CORDER);
      Py_DECREF(a);
      if (!(a = c)) return -1;
      fo->copies++;
    }
    int rc = gpt_make(self, fo, &cfg, (const float *)PyArray_DATA(a), 0, pl, ln, ct);
    Py_DECREF(a);
    return rc;
  }
  return gpt_make(self, fo, &cfg, NULL, seed, pl, ln, ct);
}

static int GPT_init_named(PyObject *self, PyObject *args, PyObject *kw) {
  int rc = GPT_init((GPTObject *)self, args, kw);
  if (rc < 0) wp_name_error("GPT");
  return rc;
}

static void GPT_dealloc(GPTObject *self) {
  if (self->g && self->fab) {
    wp_lock(self->fab);
    /* a closed fabric took the model's tensors with it: then only the struct is left (a few bytes) */
    if (self->fab->f) weft_gpt_destroy(self->g);
    wp_unlock(self->fab);
  }
  Py_XDECREF(self->fab);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyArrayObject *tokens(GPTObject *self, PyObject *o, const char *name, int *B, int *T) {
  PyArrayObject *in = (PyArrayObject *)PyArray_FromAny(o, NULL, 0, 0, 0, NULL);
  if (!in) return NULL;
  char kind = PyArray_DESCR(in)->kind;
  if (kind != 'i' && kind != 'u') {
    Py_DECREF(in);
    return PyErr_Format(PyExc_TypeError, "%s: token ids are integers (an int array)", name), NULL;
  }
  /* any integer dtype: ids beyond int32 are out of every vocabulary, and said so here (the cast to int32 would
   * wrap 2**32 + 5 to 5, a valid id) */
  if (PyArray_ITEMSIZE(in) > 4 || (kind == 'u' && PyArray_ITEMSIZE(in) == 4)) {
    PyArrayObject *w = (PyArrayObject *)PyArray_FromAny((PyObject *)in, PyArray_DescrFromType(kind == 'u' ? NPY_UINT64
                                                        : NPY_INT64), 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED,
                                                        NULL);
    if (!w) return Py_DECREF(in), NULL;
    const npy_intp n = PyArray_SIZE(w);
    for (npy_intp i = 0; i < n; i++) {
      const int64_t v = kind == 'u' ? -1 : ((const int64_t *)PyArray_DATA(w))[i];
      const uint64_t u = kind == 'u' ? ((const uint64_t *)PyArray_DATA(w))[i] : 0;
      if (kind == 'u' ? u > INT32_MAX : v < INT32_MIN || v > INT32_MAX) {
        char num[32];
        if (kind == 'u') snprintf(num, sizeof num, "%llu", (unsigned long long)u);
        else snprintf(num, sizeof num, "%lld", (long long)v);
        Py_DECREF(w), Py_DECREF(in);
        return wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s: token %s at %zd is outside 0..%d", name, num, (Py_ssize_t)i,
                        weft_gpt_get_config(self->g)->V - 1), NULL;
      }
    }
    Py_DECREF(w);
  }
  PyArrayObject *a = (PyArrayObject *)PyArray_FromAny((PyObject *)in, PyArray_DescrFromType(NPY_INT32), 0, 0,
                                                      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
  Py_DECREF(in);
  if (!a) return NULL;
  int nd = PyArray_NDIM(a);
  if (nd == 1) *B = 1, *T = (int)PyArray_DIMS(a)[0];
  else if (nd == 2) *B = (int)PyArray_DIMS(a)[0], *T = (int)PyArray_DIMS(a)[1];
  else {
    Py_DECREF(a);
    return wp_raise(WEFT_ERR_SHAPE, "%s: token ids as [T] or [B, T]; got %d dimensions", name, nd), NULL;
  }
  return a;
}

static PyObject *GPT_train_step(GPTObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"tokens", "targets", "lr", "weight_decay", "max_norm", NULL};
  PyObject *to, *tg, *lro = NULL, *wdo = NULL, *mno = NULL;
  float lr = 3e-4f, wd = 0.0f, mn = 1.0f;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO:train_step", names, &to, &tg, &lro, &wdo, &mno)) return NULL;
  if ((lro && wp_as_float(lro, "train_step", "lr", &lr)) || (wdo && wp_as_float(wdo, "train_step", "weight_decay", &wd)) ||
      (mno && wp_as_float(mno, "train_step", "max_norm", &mn)))
    return NULL;
  if (gpt_live(self)) return NULL;
  int B, T, B2, T2;
  PyArrayObject *a = tokens(self, to, "train_step: tokens", &B, &T), *b = a ? tokens(self, tg, "train_step: targets", &B2, &T2) : NULL;
  PyObject *ret = NULL;
  if (!b) goto done;
  if (B != B2 || T != T2) {
    wp_raise(WEFT_ERR_SHAPE, "train_step: tokens are [%d, %d] and targets [%d, %d]; they must be one shape", B, T, B2, T2);
    goto done;
  }
  float loss = 0, norm = 0;
  weft_status st;
  wp_lock(self->fab);
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_train_step(self->g, PyArray_DATA(a), PyArray_DATA(b), B, T, lr, wd, mn, &loss, &norm);
  Py_END_ALLOW_THREADS
  wp_unlock(self->fab);
  ret = st ? gpt_error(self, st) : Py_BuildValue("(dd)", (double)loss, (double)norm);
done:
  Py_XDECREF(a);
  Py_XDECREF(b);
  return ret;
}

static PyObject *GPT_loss(GPTObject *self, PyObject *args) {
  PyObject *to, *tg;
  if (!PyArg_ParseTuple(args, "OO:loss", &to, &tg) || gpt_live(self)) return NULL;
  int B, T, B2, T2;
  PyArrayObject *a = tokens(self, to, "loss: tokens", &B, &T), *b = a ? tokens(self, tg, "loss: targets", &B2, &T2) : NULL;
  PyObject *ret = NULL;
  if (!b) goto done;
  if (B != B2 || T != T2) {
    wp_raise(WEFT_ERR_SHAPE, "loss: tokens are [%d, %d] and targets [%d, %d]; they must be one shape", B, T, B2, T2);
    goto done;
  }
  float loss = 0;
  weft_status st;
  wp_lock(self->fab);
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_loss(self->g, PyArray_DATA(a), PyArray_DATA(b), B, T, &loss);
  Py_END_ALLOW_THREADS
  wp_unlock(self->fab);
  ret = st ? gpt_error(self, st) : PyFloat_FromDouble((double)loss);
done:
  Py_XDECREF(a);
  Py_XDECREF(b);
  return ret;
}

static PyObject *GPT_logits(GPTObject *self, PyObject *arg) {
  if (gpt_live(self)) return NULL;
  int B, T;
  PyArrayObject *a = tokens(self, arg, "logits: tokens", &B, &T);
  if (!a) return NULL;
  npy_intp d[3] = {B, T, weft_gpt_get_config(self->g)->V};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(3, d, NPY_FLOAT32);
  PyObject *ret = NULL;
  if (out) {
    weft_status st;
    wp_lock(self->fab);
    Py_BEGIN_ALLOW_THREADS st = weft_gpt_logits_all(self->g, PyArray_DATA(a), B, T, PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    wp_unlock(self->fab);
    if (st) gpt_error(self, st);
    else ret = PyArray_NDIM(a) == 1 ? PyArray_Newshape(out, &(PyArray_Dims){d + 1, 2}, NPY_CORDER) : Py_NewRef(out);
  }
  Py_XDECREF(out);
  Py_DECREF(a);
  return ret;
}

static PyObject *GPT_generate(GPTObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"prompt", "n", "temperature", "top_k", "seed", NULL};
  PyObject *po, *tempo = NULL;
  int n, top_k = 0;
  float temp = 0.0f;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|OiO&:generate", names, &po, &n, &tempo, &top_k, u64_arg, &seed)) return NULL;
  if (tempo && wp_as_float(tempo, "generate", "temperature", &temp)) return NULL;
  if (gpt_live(self)) return NULL;
  int B, T;
  PyArrayObject *p = tokens(self, po, "generate: prompt", &B, &T);
  if (!p) return NULL;
  PyObject *ret = NULL;
  if (B != 1) {
    wp_raise(WEFT_ERR_SHAPE, "generate: one prompt ([T] token ids) at a time");
    goto done;
  }
  if (n < 0) {
    wp_raise(WEFT_ERR_INVALID_ARGUMENT, "%s", "generate: n (tokens to generate) is negative");
    goto done;
  }
  const int maxT = weft_gpt_get_config(self->g)->maxT;
  if (T < 1 || T > maxT || n > maxT - T) { /* said before n ids are allocated */
    wp_raise(WEFT_ERR_SHAPE, "generate: a prompt of %d tokens and %d more must fit the context of %d (and the prompt "
             "is not empty)", T, n, maxT);
    goto done;
  }
  npy_intp d = n;
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, &d, NPY_INT32);
  if (!out) goto done;
  if (n == 0) {
    ret = (PyObject *)out;
    goto done;
  }
  uint64_t rng = seed;
  double secs = 0;
  weft_status st;
  wp_lock(self->fab);
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_generate(self->g, PyArray_DATA(p), T, n, temp, top_k, &rng, PyArray_DATA(out), &secs);
  Py_END_ALLOW_THREADS
  wp_unlock(self->fab);
  if (st) {
    Py_DECREF(out);
    gpt_error(self, st);
  } else
    ret = (PyObject *)out;
done:
  Py_DECREF(p);
  return ret;
}

static PyObject *GPT_params(GPTObject *self, PyObject *u) {
  (void)u;
  if (gpt_live(self)) return NULL;
  npy_intp n = (npy_intp)weft_gpt_param_count(weft_gpt_get_config(self->g));
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_FLOAT32);
  if (!out) return NULL;
  weft_status st;
  wp_lock(self->fab);
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_read_params(self->g, PyArray_DATA(out), (size_t)n);
  Py_END_ALLOW_THREADS
  wp_unlock(self->fab);
  if (st) {
    Py_DECREF(out);
    return gpt_error(self, st);
  }
  return (PyObject *)out;
}

static PyObject *GPT_save(GPTObject *self, PyObject *args) {
  PyObject *path;
  unsigned long long rng = 0;
  if (!PyArg_ParseTuple(args, "O&|O&:save", PyUnicode_FSConverter, &path, u64_arg, &rng)) return NULL;
  if (gpt_live(self)) return Py_DECREF(path), NULL;
  char err[512] = "";
  weft_status st;
  wp_lock(self->fab);
  Py_BEGIN_ALLOW_THREADS st = weft_gpt_checkpoint_save(self->g, PyBytes_AS_STRING(path), rng, err, sizeof err);
  Py_END_ALLOW_THREADS
  wp_unlock(self->fab);
  Py_DECREF(path);
  if (st) return wp_raise_status(st, err);
  Py_RETURN_NONE;
}

/* GPT._load(fabric, path, kind): kind "checkpoint" (weft's own, with AdamW's moments and the step) or
 * "weights" (GPT-2's safetensors or llm.c's .bin). Returns (model, rng_state). */
static PyObject *GPT_load(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *names[] = {"fabric", "path", "kind", "place", "lane", "contract", NULL};
  PyObject *fab, *path, *place = NULL, *lane = NULL, *contract = NULL;
  const char *kind = "checkpoint";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O&|sOOO:_load", names, &WP_FabricType, &fab, PyUnicode_FSConverter, &path,
                                   &kind, &place, &lane, &contract))
    return NULL;
  FabricObject *fo = (FabricObject *)fab;
  int pl, ln, ct;
  if (place_arg(place, &pl) || wp_lane(fo, lane, &ln) || wp_contract(contract, &ct)) return Py_DECREF(path), NULL;
  char err[512] = "";
  weft_status st;
  weft_gpt_config cfg;
  float *params = NULL, *m = NULL, *v = NULL;
  int64_t step = 0;
  uint64_t rng = 0;
  const char *p = PyBytes_AS_STRING(path);
  int ckpt = strcmp(kind, "checkpoint") == 0;
  Py_BEGIN_ALLOW_THREADS
  if (ckpt) st = weft_gpt_checkpoint_load(p, &cfg, &step, &rng, &params, &m, &v, err, sizeof err);
  else {
    weft_gpt_io_config io;
    size_t np = 0;
    st = weft_gpt_load(p, &io, &params, &np, err, sizeof err);
    cfg.L = io.L, cfg.C = io.C, cfg.NH = io.NH, cfg.V = io.V, cfg.maxT = io.maxT;
  }
  Py_END_ALLOW_THREADS
  Py_DECREF(path);
  if (st) return wp_raise_status(st, err);
  GPTObject *self = (GPTObject *)type->tp_alloc(type, 0);
  PyObject *ret = NULL;
  if (self && gpt_make(self, fo, &cfg, params, 0, pl, ln, ct) == 0) {
    if (ckpt) {
      size_t n = weft_gpt_param_count(&cfg);
      wp_lock(fo);
      st = weft_gpt_write_moments(self->g, m, v, n);
      if (!st) weft_gpt_set_step(self->g, step);
      wp_unlock(fo);
      if (st) gpt_error(self, st);
    }
    if (!PyErr_Occurred()) ret = Py_BuildValue("(OK)", self, (unsigned long long)rng);
  }
  Py_XDECREF(self);
  free(params), free(m), free(v);
  return ret;
}

static PyObject *GPT_close(GPTObject *self, PyObject *u) {
  (void)u;
  if (self->g) {
    wp_lock(self->fab);
    if (self->fab->f) weft_gpt_destroy(self->g);
    wp_unlock(self->fab);
    self->g = NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *GPT_get_config(GPTObject *self, void *c) {
  (void)c;
  if (!self->g) return wp_raise(WEFT_ERR_STATE, "this model is closed");
  const weft_gpt_config *k = weft_gpt_get_config(self->g);
  return Py_BuildValue("{sisisisisi}", "L", k->L, "C", k->C, "NH", k->NH, "V", k->V, "maxT", k->maxT);
}

static PyObject *GPT_get_step(GPTObject *self, void *c) {
  (void)c;
  if (!self->g) return wp_raise(WEFT_ERR_STATE, "this model is closed");
  return PyLong_FromLongLong(weft_gpt_step(self->g));
}

static PyObject *GPT_get_fabric(GPTObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->fab ? (PyObject *)self->fab : Py_None);
}

WP_NAMED_KW(GPTObject, GPT_train_step, "train_step")
WP_NAMED_1(GPTObject, GPT_loss, "loss")
WP_NAMED_1(GPTObject, GPT_logits, "logits")
WP_NAMED_KW(GPTObject, GPT_generate, "generate")
WP_NAMED_1(GPTObject, GPT_params, "params")
WP_NAMED_1(GPTObject, GPT_save, "save")
WP_NAMED_1(GPTObject, GPT_close, "close")

static PyMethodDef GPT_methods[] = {
    {"train_step", (PyCFunction)(void (*)(void))GPT_train_step_named, METH_VARARGS | METH_KEYWORDS,
     "train_step(tokens, targets, lr=3e-4, weight_decay=0.0, max_norm=1.0)\n--\n\n"
     "One training step on token ids [B, T] and their targets [B, T] (int arrays): forward, backward,\n"
     "global-norm clip to max_norm (<= 0: none), AdamW. Returns (loss, gradient norm before the clip; 0.0\n"
     "with max_norm <= 0, where no norm is computed). A NaN or infinite\n"
     "lr or weight_decay, or a NaN max_norm, raises InvalidArgumentError and changes nothing."},
    {"loss", (PyCFunction)GPT_loss_named, METH_VARARGS,
     "loss(tokens, targets)\n--\n\nThe mean cross-entropy of targets given tokens ([B, T] or [T]); forward only."},
    {"logits", (PyCFunction)GPT_logits_named, METH_O,
     "logits(tokens)\n--\n\nThe logits of every position: [B, T, V] float32 for tokens [B, T] ([T, V] for [T])."},
    {"generate", (PyCFunction)(void (*)(void))GPT_generate_named, METH_VARARGS | METH_KEYWORDS,
     "generate(prompt, n, temperature=0.0, top_k=0, seed=0)\n--\n\n"
     "n tokens after prompt ([T] token ids): the prompt in batched ops, then one token at a time with a\n"
     "KV cache. temperature <= 0 is greedy (NaN or infinite: InvalidArgumentError); top_k <= 0 samples\n"
     "the whole vocabulary. An int32 array."},
    {"params", (PyCFunction)GPT_params_named, METH_NOARGS,
     "params()\n--\n\nThe parameters as one float32 array in llm.c's order (see weft.GPT)."},
    {"save", (PyCFunction)GPT_save_named, METH_VARARGS,
     "save(path, rng_state=0)\n--\n\nWrites a weft checkpoint: configuration, step, parameters, AdamW's moments, a checksum."},
    {"close", (PyCFunction)GPT_close_named, METH_NOARGS, "close()\n--\n\nFrees the model's tensors now."},
    {"_load", (PyCFunction)(void (*)(void))GPT_load, METH_VARARGS | METH_KEYWORDS | METH_CLASS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef GPT_getset[] = {
    {"config", (getter)GPT_get_config, NULL, "The configuration: dict of L, C, NH, V, maxT.", NULL},
    {"step", (getter)GPT_get_step, NULL, "Training steps taken (AdamW's step counter).", NULL},
    {"fabric", (getter)GPT_get_fabric, NULL, "The fabric the model lives on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject WP_GPTType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.GPT",
    .tp_basicsize = sizeof(GPTObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "GPT-2 resident on a fabric (see weft.GPT).",
    .tp_new = PyType_GenericNew,
    .tp_init = GPT_init_named,
    .tp_dealloc = (destructor)GPT_dealloc,
    .tp_methods = GPT_methods,
    .tp_getset = GPT_getset,
};
