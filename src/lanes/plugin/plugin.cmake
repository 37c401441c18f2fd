# plugin.cmake - the plugin lane provider (loads lanes built outside weft and admits them after a self-test
# run by the helper executable weft-plugin-check), the NPU probe, the OpenCL example plugin (plugins/opencl)
# and the plugin tests.
set(_weft_plugin_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(weft_obj PRIVATE ${_weft_plugin_dir}/plugin.c ${_weft_plugin_dir}/selftest.c ${_weft_plugin_dir}/npu.c)

# libcrypto's SHA-256 keys admission verdicts by the plugin file's content. Without it every fabric
# admits its plugins afresh (still testing and loading one sealed copy).
find_package(OpenSSL COMPONENTS Crypto)
if(OpenSSL_FOUND)
  target_compile_definitions(weft_obj PRIVATE WEFT_PLUGIN_SHA256)
  target_link_libraries(weft_obj PUBLIC OpenSSL::Crypto)
endif()

# The helper that runs a plugin's self-test in a process of its own: built next to libweft.so and the
# `weft` CLI, installed in libexec. The library looks next to itself, then in these two places.
add_executable(weft_plugin_check ${_weft_plugin_dir}/weft_plugin_check.c)
target_link_libraries(weft_plugin_check PRIVATE weft_static)
target_include_directories(weft_plugin_check PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(weft_plugin_check PROPERTIES OUTPUT_NAME weft-plugin-check
                                                   RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
target_compile_definitions(weft_obj PRIVATE
  WEFT_PLUGIN_CHECK_INSTALLED="${CMAKE_INSTALL_FULL_LIBEXECDIR}/weft/weft-plugin-check"
  WEFT_PLUGIN_CHECK_BUILT="$<TARGET_FILE:weft_plugin_check>")
install(TARGETS weft_plugin_check RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/weft)

include(${PROJECT_SOURCE_DIR}/plugins/opencl/opencl.cmake OPTIONAL)
if(BUILD_TESTING)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/plugin ${CMAKE_BINARY_DIR}/tests/plugin)
endif()
