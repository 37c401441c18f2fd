# Browser lanes end to end (browser_lane.c): a fabric listening for tabs, the worker page in headless
# Chromium driven by browser_lane_tab.mjs (playwright-core from tests/web/package.json), every op pinned to
# the tab against the CPU lane bit for bit, the page closed mid-run. Skips (77) without Chromium or
# playwright-core; left out when weft was built without browser lanes or node is missing.
if(NOT WEFT_HAVE_BROWSER)
  return()
endif()
# Hostile clients of the tab endpoint and of `weft serve` (browser_hostile.c): raw WebSocket clients and a
# scripted tab in C, no browser or node needed; under ASan in the sanitizer build.
add_executable(test_browser_hostile ${CMAKE_CURRENT_LIST_DIR}/browser_hostile.c)
target_link_libraries(test_browser_hostile PRIVATE weft_nettest)
add_test(NAME browser_hostile COMMAND test_browser_hostile $<TARGET_FILE:weft_cli>)
set_tests_properties(browser_hostile PROPERTIES TIMEOUT 120
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
find_program(WEFT_NODE NAMES node nodejs DOC "Node.js, for the browser tests")
if(NOT WEFT_NODE)
  message(STATUS "browser lane test: skipped: no node (Debian: apt-get install nodejs npm)")
  return()
endif()
# The page folder the tests serve: the built one (<build>/web, with weft.wasm, so a tab offers the version-2
# ops) when weft.wasm is built, else the sources (a tab then offers the version-1 ops).
if(WEFT_WASM_BUILT)
  set(_weft_test_web ${WEFT_WEB_DIR})
else()
  set(_weft_test_web ${PROJECT_SOURCE_DIR}/web)
endif()
add_executable(test_browser_lane ${CMAKE_CURRENT_LIST_DIR}/browser_lane.c)
target_link_libraries(test_browser_lane PRIVATE weft_testlib)
add_test(NAME browser_lane COMMAND test_browser_lane ${WEFT_NODE} ${CMAKE_CURRENT_LIST_DIR}/browser_lane_tab.mjs
         ${CMAKE_CURRENT_LIST_DIR}/browser_lane_fake.mjs
         ${_weft_test_web})
set_tests_properties(browser_lane PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
# `weft serve` end to end: where it listens, a tab joining with the CPU's bits and leaving, clean SIGINT.
add_test(NAME browser_lane_serve COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/browser_lane_serve.sh $<TARGET_FILE:weft_cli>
         ${WEFT_NODE} ${CMAKE_CURRENT_LIST_DIR}/browser_lane_tab.mjs ${_weft_test_web})
set_tests_properties(browser_lane_serve PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
# The worker page's version-2 ops (worker.js over weft.wasm, in Node) refuse requests that do not fit.
if(WEFT_WASM_BUILT)
  add_test(NAME web_worker_wasm COMMAND ${WEFT_NODE} ${CMAKE_CURRENT_LIST_DIR}/worker_wasm.mjs ${WEFT_WEB_DIR})
  set_tests_properties(web_worker_wasm PROPERTIES TIMEOUT 60)
endif()
