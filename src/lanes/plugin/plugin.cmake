# plugin.cmake - the plugin lane provider (loads lanes built outside weft, admits them after a self-test in
# a child process), the NPU probe, the OpenCL example plugin (plugins/opencl) and the plugin tests.
set(_weft_plugin_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(weft_obj PRIVATE ${_weft_plugin_dir}/plugin.c ${_weft_plugin_dir}/npu.c)

include(${PROJECT_SOURCE_DIR}/plugins/opencl/opencl.cmake OPTIONAL)
if(BUILD_TESTING)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/plugin ${CMAKE_BINARY_DIR}/tests/plugin)
endif()
