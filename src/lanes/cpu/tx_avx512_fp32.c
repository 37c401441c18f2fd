/* tx_avx512_fp32.c - the transformer ops' vector kernels (tx_kern.inc) at 16 lanes for the fp32 contract,
 * built with -mavx512f and -ffp-contract=fast (fused multiply-adds). */
#define TX_W 16
#define TX_NAME weft_cpu_tx_avx512_fp32
#define TX_ISA "avx512"
#define TX_FP32 1
#include "tx_kern.inc"
