# Remote lanes (lanes of a `weft worker` on another machine) and the wire protocol's shared half, built into
# the library. OpenSSL (Debian: libssl-dev) provides HMAC-SHA256 for the mutual challenge-response and libssl
# TLS 1.3 under the frames (src/net/tls.c).
find_package(OpenSSL COMPONENTS Crypto SSL)
if(NOT OpenSSL_FOUND)
  message(STATUS "weft: remote lanes left out: OpenSSL (libcrypto, libssl) not found (Debian: libssl-dev)")
  return()
endif()
# client.c is the protocol's client half, shared with browser lanes (src/lanes/browser); peer_lane.c the lane
# glue on top of it that remote lanes share with MPI lanes (src/lanes/mpi).
target_sources(weft_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/remote_lane.c ${CMAKE_CURRENT_LIST_DIR}/../../net/protocol.c
                                ${CMAKE_CURRENT_LIST_DIR}/../../net/client.c ${CMAKE_CURRENT_LIST_DIR}/../../net/peer_lane.c
                                ${CMAKE_CURRENT_LIST_DIR}/../../net/tls.c ${CMAKE_CURRENT_LIST_DIR}/../../net/stripe.c)
target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_REMOTE)
target_link_libraries(weft_obj PUBLIC OpenSSL::SSL OpenSSL::Crypto)
target_link_libraries(weft PUBLIC OpenSSL::SSL OpenSSL::Crypto)
target_link_libraries(weft_static PUBLIC OpenSSL::SSL OpenSSL::Crypto)
set(WEFT_HAVE_REMOTE ON)
