# Browser lanes: tabs that open the worker page (web/worker/) join the fabric as browser:N over WebSocket.
# libwebsockets (Debian: libwebsockets-dev) is the server; the wire protocol and its client come with the
# remote lanes (libcrypto). Without either, the lanes are left out and `weft devices` says why.
option(WEFT_BROWSER_LANES "Build browser lanes and weft serve's server when libwebsockets is found" ON)
if(NOT WEFT_BROWSER_LANES)
  message(STATUS "weft: browser lanes left out (WEFT_BROWSER_LANES=OFF)")
  return()
endif()
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(LWS IMPORTED_TARGET libwebsockets)
endif()
if(NOT WEFT_HAVE_REMOTE OR NOT LWS_FOUND)
  message(STATUS "weft: browser lanes left out: libwebsockets not found (Debian: libwebsockets-dev) or no libcrypto")
  return()
endif()
target_sources(weft_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/browser_lane.c)
target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_BROWSER)
target_link_libraries(weft_obj PUBLIC PkgConfig::LWS)
target_link_libraries(weft PUBLIC PkgConfig::LWS)
target_link_libraries(weft_static PUBLIC PkgConfig::LWS)
set(WEFT_HAVE_BROWSER ON)
# Static consumers of libweft.a need libwebsockets too (weft.pc).
set(WEFT_PC_REQUIRES "${WEFT_PC_REQUIRES} libwebsockets")
