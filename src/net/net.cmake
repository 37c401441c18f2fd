# src/net: the wire protocol and `weft worker`'s engine. The protocol's decoder (protocol.c) is built into
# the library with the remote lane (src/lanes/remote/remote.cmake); the worker is a static library the CLI,
# the tests and the fuzzer link. libcrypto (Debian: libssl-dev) provides HMAC-SHA256 and the nonces.
include(${CMAKE_CURRENT_LIST_DIR}/../lanes/remote/remote.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../lanes/browser/browser.cmake)
if(NOT WEFT_HAVE_REMOTE)
  message(FATAL_ERROR "weft: `weft worker` needs libcrypto (Debian: libssl-dev)")
endif()
add_library(weft_net STATIC src/net/worker.c)
target_include_directories(weft_net PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(weft_net PUBLIC weft_static OpenSSL::Crypto Threads::Threads)
include(${CMAKE_CURRENT_LIST_DIR}/mpi.cmake)
if(BUILD_TESTING)
  add_subdirectory(tests/net)
endif()
# Figures (not a test): bench_net /path/to/weft.
add_executable(bench_net bench/net/bench_net.c)
target_link_libraries(bench_net PRIVATE weft_net)
