# The CLI links the static library so it runs from the build tree without an install.
add_executable(weft_cli src/tools/weft.c src/tools/cli_bench.c src/tools/cli_util.c)
target_link_libraries(weft_cli PRIVATE weft_static)
target_include_directories(weft_cli PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
set_target_properties(weft_cli PROPERTIES OUTPUT_NAME weft)
