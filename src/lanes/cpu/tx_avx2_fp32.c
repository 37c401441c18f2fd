/* tx_avx2_fp32.c - the transformer ops' vector kernels (tx_kern.inc) at 8 lanes for the fp32 contract, built
 * with -mavx2 -mfma and -ffp-contract=fast (fused multiply-adds; the lane picks avx2 only with FMA). */
#define TX_W 8
#define TX_NAME weft_cpu_tx_avx2_fp32
#define TX_ISA "avx2"
#define TX_FP32 1
#include "tx_kern.inc"
