# cuda.cmake - the CUDA lanes (cuda:N and cuda:N.tensor): compiles the kernels with nvcc into a fatbin (sm_90
# and sm_80 machine code, compute_75 PTX for every other GPU the driver can compile it for) and embeds it in
# the library. The driver and cuBLAS are opened at run time (dlopen), so the library needs neither to run:
# only nvcc and CUDA's headers at build time.
#
# WEFT_CUDA: AUTO builds the lanes when nvcc and the headers are found (and says why not otherwise); ON
# requires them; OFF leaves the lanes out. nvcc is looked for on the PATH, in $CUDA_HOME/bin and in
# /usr/local/cuda/bin.
set(WEFT_CUDA "AUTO" CACHE STRING "Build the CUDA lanes: AUTO (if nvcc and CUDA headers are found), ON, OFF")
string(TOUPPER "${WEFT_CUDA}" _weft_cu_mode)
set(_weft_cu_dir ${CMAKE_CURRENT_LIST_DIR})

# The tests are added whatever happens below: without the lanes they check that weft says why they are
# absent.
if(BUILD_TESTING)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/cuda ${CMAKE_BINARY_DIR}/tests/cuda)
endif()

if(_weft_cu_mode STREQUAL "OFF")
  message(STATUS "weft: CUDA lanes off (WEFT_CUDA=OFF)")
  return()
endif()

find_program(WEFT_NVCC nvcc HINTS ENV CUDA_HOME PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
set(_weft_cu_missing "")
if(NOT WEFT_NVCC)
  list(APPEND _weft_cu_missing "nvcc (CUDA toolkit)")
  set(_weft_cu_inc_hint "")
else()
  get_filename_component(_weft_cu_bin ${WEFT_NVCC} DIRECTORY)
  set(_weft_cu_inc_hint ${_weft_cu_bin}/../include)
endif()
find_path(WEFT_CUDA_INCLUDE_DIR cuda.h HINTS ${_weft_cu_inc_hint} ENV CUDA_HOME PATH_SUFFIXES include
          PATHS /usr/local/cuda/include)
find_path(WEFT_CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${_weft_cu_inc_hint} ${WEFT_CUDA_INCLUDE_DIR} ENV CUDA_HOME
          PATH_SUFFIXES include PATHS /usr/local/cuda/include)
if(NOT WEFT_CUDA_INCLUDE_DIR)
  list(APPEND _weft_cu_missing "cuda.h")
endif()
if(NOT WEFT_CUBLAS_INCLUDE_DIR)
  list(APPEND _weft_cu_missing "cublas_v2.h")
endif()
if(_weft_cu_missing)
  string(REPLACE ";" ", " _weft_cu_missing "${_weft_cu_missing}")
  if(_weft_cu_mode STREQUAL "ON")
    message(FATAL_ERROR "weft: WEFT_CUDA=ON but the CUDA lanes need: ${_weft_cu_missing}")
  endif()
  message(STATUS "weft: CUDA lanes left out: not found: ${_weft_cu_missing}")
  return()
endif()
message(STATUS "weft: CUDA lanes on (${WEFT_NVCC}, headers ${WEFT_CUDA_INCLUDE_DIR})")

# Exact contract: no contraction into FMA, no flush-to-zero, IEEE division and square root. The kernels
# also spell every exact multiply and add as __fmul_rn/__fadd_rn, which no flag can fuse.
set(_weft_cu_gen ${CMAKE_BINARY_DIR}/cuda_kernels)
file(MAKE_DIRECTORY ${_weft_cu_gen})
set(_weft_cu_fatbin ${_weft_cu_gen}/weft_kernels.fatbin)
set(_weft_cu_c ${_weft_cu_gen}/weft_kernels_fatbin.c)
add_custom_command(
  OUTPUT ${_weft_cu_c}
  COMMAND ${WEFT_NVCC} --fatbin -std=c++17 -O3 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true
          -gencode arch=compute_90,code=sm_90
          -gencode arch=compute_80,code=sm_80
          -gencode arch=compute_75,code=compute_75
          -I ${_weft_cu_dir} -o ${_weft_cu_fatbin} ${_weft_cu_dir}/cuda_kernels.cu
  COMMAND ${CMAKE_COMMAND} -DIN=${_weft_cu_fatbin} -DOUT=${_weft_cu_c} -P ${_weft_cu_dir}/fatbin_embed.cmake
  DEPENDS ${_weft_cu_dir}/cuda_kernels.cu ${_weft_cu_dir}/cuda_args.h ${_weft_cu_dir}/cuda_tx.cu
          ${_weft_cu_dir}/cuda_tx_args.h ${_weft_cu_dir}/fatbin_embed.cmake
          ${PROJECT_SOURCE_DIR}/cmake/embed_bytes.cmake
  COMMENT "nvcc: CUDA lane kernels (sm_90, sm_80, compute_75 PTX)"
  VERBATIM)

target_sources(weft_obj PRIVATE
  ${_weft_cu_dir}/cuda_api.c
  ${_weft_cu_dir}/cuda_ops.c
  ${_weft_cu_dir}/cuda_lane.c
  ${_weft_cu_c})
# CUDA's headers are used for types and constants only: nothing links against CUDA.
target_include_directories(weft_obj SYSTEM PRIVATE ${WEFT_CUDA_INCLUDE_DIR} ${WEFT_CUBLAS_INCLUDE_DIR})
target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_CUDA)
# test_cuda_tx drives the kernels through the driver API itself: it needs the lane's headers and CUDA's.
if(TARGET test_cuda_tx)
  target_compile_definitions(test_cuda_tx PRIVATE WEFT_HAVE_CUDA)
  target_include_directories(test_cuda_tx PRIVATE ${_weft_cu_dir})
  target_include_directories(test_cuda_tx SYSTEM PRIVATE ${WEFT_CUDA_INCLUDE_DIR} ${WEFT_CUBLAS_INCLUDE_DIR})
endif()

# bench/cuda: weft's CUDA lanes against cuBLAS called directly (through dlopen, like the lane).
add_subdirectory(${PROJECT_SOURCE_DIR}/bench/cuda ${CMAKE_BINARY_DIR}/bench/cuda)
