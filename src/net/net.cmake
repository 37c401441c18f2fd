# src/net: the wire protocol and `weft worker`'s engine, as a static library the CLI, the tests and the
# fuzzer link. libcrypto (Debian: libssl-dev) provides HMAC-SHA256 and the nonces.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
add_library(weft_net STATIC src/net/protocol.c src/net/worker.c)
target_include_directories(weft_net PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(weft_net PUBLIC weft_static OpenSSL::Crypto Threads::Threads)
if(BUILD_TESTING)
  add_subdirectory(tests/net)
endif()
