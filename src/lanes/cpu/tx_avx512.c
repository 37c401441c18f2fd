/* tx_avx512.c - the transformer ops' vector kernels (tx_kern.inc) at 16 lanes, built with -mavx512f. */
#define TX_W 16
#define TX_NAME weft_cpu_tx_avx512
#define TX_ISA "avx512"
#include "tx_kern.inc"
