# wasm.cmake - weft.wasm (weft's CPU matmul, cost model and router, the same C sources as the native
# library, compiled with clang --target=wasm32, freestanding, no sysroot) and the servable page folder
# <build>/web/:
#   <build>/web/bench/   the Bench page (web/bench)
#   <build>/web/gpu/     the WebGPU module and kernels (web/gpu)
#   <build>/web/wasm/weft.wasm
# Skipped, with the reason, when no clang that targets wasm32 and links with wasm-ld is found.

set(WEFT_WEB_DIR ${CMAKE_BINARY_DIR}/web)
set(_weft_wasm_src ${CMAKE_CURRENT_LIST_DIR})
set(_weft_root ${CMAKE_CURRENT_LIST_DIR}/../..)
get_filename_component(_weft_root ${_weft_root} ABSOLUTE)

if(CMAKE_C_COMPILER_ID STREQUAL "Clang")
  set(_weft_wasm_clang_hint ${CMAKE_C_COMPILER})
endif()
find_program(WEFT_WASM_CLANG NAMES ${_weft_wasm_clang_hint} clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14
             DOC "clang used for --target=wasm32 (weft.wasm)")

# Probe: compile and link an empty module, which needs both the wasm32 backend and wasm-ld.
set(_weft_wasm_ok FALSE)
if(WEFT_WASM_CLANG)
  set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/weft_wasm_probe)
  file(MAKE_DIRECTORY ${_probe_dir})
  file(WRITE ${_probe_dir}/probe.c "__attribute__((export_name(\"probe\"))) int probe(void) { return 1; }\n")
  execute_process(
    COMMAND ${WEFT_WASM_CLANG} --target=wasm32 -nostdlib -ffreestanding -Wl,--no-entry -o ${_probe_dir}/probe.wasm
            ${_probe_dir}/probe.c
    RESULT_VARIABLE _probe_rc OUTPUT_VARIABLE _probe_out ERROR_VARIABLE _probe_out)
  if(_probe_rc EQUAL 0)
    set(_weft_wasm_ok TRUE)
  else()
    string(STRIP "${_probe_out}" _probe_out)
    set(_weft_wasm_why "${WEFT_WASM_CLANG} cannot build for wasm32 (install Debian's clang and lld for wasm-ld): ${_probe_out}")
  endif()
else()
  set(_weft_wasm_why "no clang found (install Debian's clang and lld)")
endif()

set(WEFT_WASM_BUILT ${_weft_wasm_ok})
if(NOT _weft_wasm_ok)
  message(STATUS "weft.wasm and the Bench page: skipped: ${_weft_wasm_why}")
  return()
endif()
message(STATUS "weft.wasm: ${WEFT_WASM_CLANG} --target=wasm32 -> ${WEFT_WEB_DIR}")

# The same sources the native CPU lane and router are built from, plus the wasm entry points and the few
# C library functions they need.
set(WEFT_WASM_SOURCES
  ${_weft_wasm_src}/weft_wasm.c
  ${_weft_wasm_src}/libc_shim.c
  ${_weft_wasm_src}/weft_wasm_ops.c
  ${_weft_root}/src/core/reference_tx.c
  ${_weft_root}/src/core/wmath.c
  ${_weft_root}/src/lanes/cpu/gemm.c
  ${_weft_root}/src/lanes/cpu/kernels/ukr_portable.c
  ${_weft_root}/src/lanes/cpu/tx_portable.c
  ${_weft_root}/src/lanes/cpu/tx_portable_fp32.c
  ${_weft_root}/src/cost/model.c
  ${_weft_root}/src/sched/route.c
)
file(GLOB _weft_wasm_headers CONFIGURE_DEPENDS
  ${_weft_wasm_src}/shim/*.h ${_weft_root}/include/*.h ${_weft_root}/src/core/*.h ${_weft_root}/src/cost/*.h
  ${_weft_root}/src/sched/*.h ${_weft_root}/src/lanes/cpu/*.h ${_weft_root}/src/lanes/cpu/kernels/*.h)

# -ffp-contract=off as everywhere in weft (the exact contract); simd128 lets the portable microkernel
# vectorise (WebAssembly SIMD has no fused multiply-add, so nothing can fuse). The heap grows on demand.
set(_weft_wasm_flags
  --target=wasm32 -std=gnu11 -O3 -ffreestanding -nostdlib -msimd128 -ffp-contract=off -fno-fast-math
  -fvisibility=hidden -Wall -Wextra
  -isystem ${_weft_wasm_src}/shim -I${_weft_root}/include -I${_weft_root}/src -I${_weft_root}/src/lanes/cpu
  -Wl,--no-entry -Wl,-z,stack-size=1048576)
if(WEFT_WERROR)
  list(APPEND _weft_wasm_flags -Werror)
endif()

add_custom_command(
  OUTPUT ${WEFT_WEB_DIR}/wasm/weft.wasm
  COMMAND ${CMAKE_COMMAND} -E make_directory ${WEFT_WEB_DIR}/wasm
  COMMAND ${WEFT_WASM_CLANG} ${_weft_wasm_flags} ${WEFT_WASM_SOURCES} -o ${WEFT_WEB_DIR}/wasm/weft.wasm
  DEPENDS ${WEFT_WASM_SOURCES} ${_weft_wasm_headers}
  COMMENT "Building weft.wasm (CPU matmul, cost model, router for the browser)"
  VERBATIM)

# The page's files, copied as they change, so <build>/web serves as is.
set(_weft_web_outputs ${WEFT_WEB_DIR}/wasm/weft.wasm)
foreach(sub bench gpu worker)
  file(GLOB _files CONFIGURE_DEPENDS ${_weft_root}/web/${sub}/*.html ${_weft_root}/web/${sub}/*.js
       ${_weft_root}/web/${sub}/*.css ${_weft_root}/web/${sub}/*.wgsl)
  foreach(f ${_files})
    get_filename_component(name ${f} NAME)
    add_custom_command(
      OUTPUT ${WEFT_WEB_DIR}/${sub}/${name}
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${f} ${WEFT_WEB_DIR}/${sub}/${name}
      DEPENDS ${f}
      VERBATIM)
    list(APPEND _weft_web_outputs ${WEFT_WEB_DIR}/${sub}/${name})
  endforeach()
endforeach()
# the index at / (links to the two pages)
add_custom_command(
  OUTPUT ${WEFT_WEB_DIR}/index.html
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${_weft_root}/web/index.html ${WEFT_WEB_DIR}/index.html
  DEPENDS ${_weft_root}/web/index.html
  VERBATIM)
list(APPEND _weft_web_outputs ${WEFT_WEB_DIR}/index.html)
add_custom_target(weft_web ALL DEPENDS ${_weft_web_outputs})
# `weft serve` serves this folder; installed, it finds it at <prefix>/share/weft/web.
install(DIRECTORY ${WEFT_WEB_DIR}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/weft/web)
