# opencl.cmake - the OpenCL example plugin (weft_opencl.so): a lane built outside the library and loaded
# through the plugin ABI. Built when the OpenCL headers and ICD loader are found (Debian: opencl-headers,
# ocl-icd-opencl-dev); run with any ICD (pocl-opencl-icd on a machine without a GPU). weft itself never
# links OpenCL: only the plugin does, and weft dlopens the plugin.
find_package(OpenCL QUIET)
if(NOT OpenCL_FOUND)
  message(STATUS "weft: OpenCL plugin left out: no OpenCL headers or libOpenCL (Debian: opencl-headers ocl-icd-opencl-dev)")
  return()
endif()
message(STATUS "weft: OpenCL plugin on (${OpenCL_LIBRARY})")

set(_weft_ocl_dir ${CMAKE_CURRENT_LIST_DIR})
set(_weft_ocl_gen ${CMAKE_BINARY_DIR}/plugins/opencl/kernels_cl.c)
# kernels.cl becomes a C array; re-run at configure time whenever it changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_weft_ocl_dir}/kernels.cl)
file(READ ${_weft_ocl_dir}/kernels.cl _weft_ocl_hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _weft_ocl_bytes "${_weft_ocl_hex}")
file(WRITE ${_weft_ocl_gen}.tmp "/* generated from plugins/opencl/kernels.cl */\nconst char weft_ocl_source[] = {${_weft_ocl_bytes} 0};\n")
configure_file(${_weft_ocl_gen}.tmp ${_weft_ocl_gen} COPYONLY)

add_library(weft_opencl MODULE ${_weft_ocl_dir}/opencl.c ${_weft_ocl_gen})
target_include_directories(weft_opencl PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(weft_opencl PRIVATE OpenCL::OpenCL)
target_compile_definitions(weft_opencl PRIVATE CL_TARGET_OPENCL_VERSION=120)
set_target_properties(weft_opencl PROPERTIES PREFIX "" C_VISIBILITY_PRESET hidden)
install(TARGETS weft_opencl LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/weft/plugins)
set(WEFT_OPENCL_PLUGIN ON)

if(BUILD_TESTING)
  # The whole conformance suite on the OpenCL lane(s) next to the CPU lane (every op, the transformer ops
  # included, bit for bit); the GPT-2-shaped block (forward, backward, clip, AdamW) pinned to it, routed,
  # round robin and pipelined with the CPU; and the small GPT model's trained weights, tokens and logits on
  # it against the CPU's. Each ends Skipped (77) when no OpenCL lane is here.
  foreach(t conformance gpt_block gpt)
    add_test(NAME ${t}_opencl COMMAND test_${t})
    set_tests_properties(${t}_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
      ENVIRONMENT "WEFT_PLUGIN_PATH=$<TARGET_FILE:weft_opencl>;WEFT_TEST_LANES=cpu,opencl;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endforeach()
endif()
