/* tx_avx2.c - the transformer ops' vector kernels (tx_kern.inc) at 8 lanes, built with -mavx2. */
#define TX_W 8
#define TX_NAME weft_cpu_tx_avx2
#define TX_ISA "avx2"
#include "tx_kern.inc"
