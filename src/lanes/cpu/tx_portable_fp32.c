/* tx_portable_fp32.c - the transformer ops' vector kernels (tx_kern.inc) at 4 lanes for the fp32 contract,
 * built with the baseline flags and -ffp-contract=fast (fused only where the baseline has FMA). */
#define TX_W 4
#define TX_NAME weft_cpu_tx_portable_fp32
#define TX_ISA "portable"
#define TX_FP32 1
#include "tx_kern.inc"
