# The CPU lane's sources beyond cpu_lane.c and gemm.c: the thread pool, the other ops, the instruction-set choice, and the
# microkernels, each ISA's file built with that ISA's flags (selected at run time, so the library still runs
# on CPUs without them). -ffp-contract=off stays on for all of them but the fp32 transformer kernels below: elsewhere
# only explicit FMA intrinsics fuse.
# This file is included before weft_obj is defined, so it adds to the source list the target is built from.
list(APPEND WEFT_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.c
  ${CMAKE_CURRENT_LIST_DIR}/cpu_isa.c
  ${CMAKE_CURRENT_LIST_DIR}/tx.c
  ${CMAKE_CURRENT_LIST_DIR}/tx_portable.c
  ${CMAKE_CURRENT_LIST_DIR}/tx_portable_fp32.c
  ${CMAKE_CURRENT_LIST_DIR}/kernels/ukr_portable.c
)
# The fp32 contract's builds of the transformer kernels: the one place outside the matmul microkernels where
# the compiler may fuse (the option comes after the library-wide -ffp-contract=off, so it wins).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tx_portable_fp32.c PROPERTIES COMPILE_OPTIONS "-ffp-contract=fast")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i[3-6]86)$")
  list(APPEND WEFT_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/kernels/ukr_avx2.c
    ${CMAKE_CURRENT_LIST_DIR}/kernels/ukr_avx512.c
    ${CMAKE_CURRENT_LIST_DIR}/tx_avx2.c
    ${CMAKE_CURRENT_LIST_DIR}/tx_avx512.c
    ${CMAKE_CURRENT_LIST_DIR}/tx_avx2_fp32.c
    ${CMAKE_CURRENT_LIST_DIR}/tx_avx512_fp32.c
  )
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels/ukr_avx2.c PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels/ukr_avx512.c PROPERTIES COMPILE_OPTIONS "-mavx512f")
  # The transformer ops' vector kernels: no -mfma for AVX2 (they never fuse; without the flag nothing can).
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tx_avx2.c PROPERTIES COMPILE_OPTIONS "-mavx2")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tx_avx512.c PROPERTIES COMPILE_OPTIONS "-mavx512f")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tx_avx2_fp32.c PROPERTIES COMPILE_OPTIONS
                              "-mavx2;-mfma;-ffp-contract=fast")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tx_avx512_fp32.c PROPERTIES COMPILE_OPTIONS
                              "-mavx512f;-ffp-contract=fast")
endif()
