# Remote lanes (lanes of a `weft worker` on another machine) and the wire protocol's shared half, built into
# the library. libcrypto (Debian: libssl-dev) provides HMAC-SHA256 for the worker's challenge-response.
find_package(OpenSSL COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  message(STATUS "weft: remote lanes left out: libcrypto not found (Debian: libssl-dev)")
  return()
endif()
# client.c is the protocol's client half, shared with browser lanes (src/lanes/browser).
target_sources(weft_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/remote_lane.c ${CMAKE_CURRENT_LIST_DIR}/../../net/protocol.c
                                ${CMAKE_CURRENT_LIST_DIR}/../../net/client.c)
target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_REMOTE)
target_link_libraries(weft_obj PUBLIC OpenSSL::Crypto)
target_link_libraries(weft PUBLIC OpenSSL::Crypto)
target_link_libraries(weft_static PUBLIC OpenSSL::Crypto)
set(WEFT_HAVE_REMOTE ON)
