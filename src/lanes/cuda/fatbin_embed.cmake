# fatbin_embed.cmake - run as `cmake -DIN=kernels.fatbin -DOUT=kernels_fatbin.c -P fatbin_embed.cmake`:
# writes the fatbin as a C byte array weft_cuda_fatbin (16-byte aligned, as cuModuleLoadData wants) and its
# size weft_cuda_fatbin_size. Pure CMake, so the build needs nothing beyond nvcc.
foreach(v IN ITEMS IN OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "fatbin_embed.cmake: -D${v}=... is required")
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/embed_bytes.cmake)
weft_embed_bytes(${IN} ${OUT} weft_cuda_fatbin 16 "the CUDA lane's kernels by fatbin_embed.cmake")
