/* gpt_model.c - src/gpt/gpt.c (GPT-2 on weft's public API, as `weft gpt` links it) compiled into the module:
 * py_gpt.c drives it on numpy arrays. Included rather than listed so that `pip install ./python` names
 * only sources under python/ (setuptools takes no paths outside the project). */
#include "gpt/gpt.c"
