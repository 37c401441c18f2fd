/* tx_portable.c - the transformer ops' vector kernels (tx_kern.inc) at 4 lanes, built with the baseline flags. */
#define TX_W 4
#define TX_NAME weft_cpu_tx_portable
#define TX_ISA "portable"
#include "tx_kern.inc"
