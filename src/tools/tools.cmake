# The `weft` CLI. It links the static library so it runs from the build tree without an install, cJSON
# (Debian: libcjson-dev) for its --json output, found once for the library's calibration cache, and zlib
# (Debian: zlib1g-dev) for `weft mlp`, which reads scikit-learn's gzipped digits.
if(NOT TARGET PkgConfig::CJSON)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(CJSON REQUIRED IMPORTED_TARGET libcjson)
endif()
find_package(ZLIB REQUIRED)

# GPT-2 on the public API (src/gpt): the model, its training and generation, checkpoints; used by
# `weft gpt` and tests/test_gpt.c.
add_library(weft_gpt STATIC src/gpt/gpt.c)
target_link_libraries(weft_gpt PUBLIC weft_static m)
target_include_directories(weft_gpt PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)

add_executable(weft_cli
  src/tools/weft.c
  src/tools/cli_util.c
  src/tools/cli_measure.c
  src/tools/cli_devices.c
  src/tools/cli_bench.c
  src/tools/cli_route.c
  src/tools/cli_mlp.c
  src/tools/cli_worker.c
  src/tools/cli_serve.c
  src/tools/cli_gpt.c
)
target_link_libraries(weft_cli PRIVATE weft_net weft_gpt weft_static PkgConfig::CJSON ZLIB::ZLIB)
target_include_directories(weft_cli PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
set_target_properties(weft_cli PROPERTIES OUTPUT_NAME weft)

# The CLI's contract with scripts: help and version succeed, usage errors exit 2, JSON and CSV come out,
# and a short bench agrees across lanes.
if(BUILD_TESTING)
  add_test(NAME cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/src/tools/cli_test.sh $<TARGET_FILE:weft_cli>)
  # What a first run meets, with a loopback worker as a second lane: bench's calibration lines, paired
  # times and plot checks, calibrate's exit status, the worker's log, messages (cli_ux_test.sh).
  add_test(NAME cli_first_run COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/src/tools/cli_ux_test.sh $<TARGET_FILE:weft_cli>)
  set_tests_properties(cli_first_run PROPERTIES TIMEOUT 240)
  # `weft mlp`: the same weights bit for bit on the CPU, on Vulkan and routed; >= 95% held out; a missing
  # data file is a clear failure. Skipped (77) where scikit-learn's digits are not installed.
  add_test(NAME mlp COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/src/tools/mlp_test.sh $<TARGET_FILE:weft_cli>)
  set_tests_properties(mlp PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # `weft gpt`: train 3 steps, resume, Ctrl-C, damaged checkpoints, generate.
  add_test(NAME gpt_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/src/tools/gpt_test.sh $<TARGET_FILE:weft_cli>)
  set_tests_properties(gpt_cli PROPERTIES TIMEOUT 120)
endif()
