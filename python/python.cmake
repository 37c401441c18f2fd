# python.cmake - the Python package (python/weft, ctypes over libweft): its pytest suite as the CTest test
# `python`, and, when WEFT_INSTALL_PYTHON is on, its installation by `cmake --install`.

# Debian's interpreter by default: that is the one python3-numpy and python3-pytest are installed for.
if(EXISTS /usr/bin/python3)
  set(_weft_python_default /usr/bin/python3)
else()
  find_program(_weft_python_default NAMES python3)
endif()
set(WEFT_PYTHON "${_weft_python_default}" CACHE FILEPATH "Python interpreter the Python tests run under")

if(BUILD_TESTING AND WEFT_PYTHON)
  set(_weft_py_env
      "WEFT_LIBRARY=$<TARGET_FILE:weft>"
      "PYTHONDONTWRITEBYTECODE=1")
  if(WEFT_SANITIZE)
    # The library carries ASan, whose runtime must be the first library of the process: preload it into the
    # interpreter. Python itself leaks by design at exit, so leak checking is off for this test.
    if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
      set(_weft_runtimes libasan.so libubsan.so)
    elseif(CMAKE_C_COMPILER_ID MATCHES "Clang")
      set(_weft_runtimes libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so) # UBSan's handlers are in it
    else()
      set(_weft_runtimes)
    endif()
    set(_weft_preload "")
    foreach(_rt ${_weft_runtimes})
      execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=${_rt} OUTPUT_VARIABLE _path
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(IS_ABSOLUTE "${_path}" AND EXISTS "${_path}")
        list(APPEND _weft_preload "${_path}")
      else()
        set(_weft_py_skip "the sanitizer runtime ${_rt} was not found, so python cannot load the ASan library")
      endif()
    endforeach()
    if(NOT _weft_runtimes)
      set(_weft_py_skip "no known sanitizer runtime to preload for ${CMAKE_C_COMPILER_ID}")
    endif()
    string(REPLACE ";" ":" _weft_preload "${_weft_preload}")
    list(APPEND _weft_py_env "LD_PRELOAD=${_weft_preload}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
  if(_weft_py_skip)
    add_test(NAME python COMMAND ${WEFT_PYTHON} -c "import sys; print('skipped: ${_weft_py_skip}'); sys.exit(77)")
  else()
    add_test(NAME python COMMAND ${WEFT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tests/run_tests.py)
  endif()
  set_tests_properties(python PROPERTIES ENVIRONMENT "${_weft_py_env}" SKIP_RETURN_CODE 77 TIMEOUT 900)
  # `out=` naming an input on the remote lanes of a real worker (its CPU and, where there is one, its GPU).
  if(TARGET weft_cli AND NOT _weft_py_skip)
    add_test(NAME python_inplace_remote COMMAND sh ${PROJECT_SOURCE_DIR}/tests/net/with_worker.sh
             $<TARGET_FILE:weft_cli> ${WEFT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tests/run_tests.py
             -k "test_inplace and remote")
    set_tests_properties(python_inplace_remote PROPERTIES
      ENVIRONMENT "${_weft_py_env};WEFT_WORKER_LANES=cpu,vulkan" SKIP_RETURN_CODE 77 TIMEOUT 300)
  endif()
endif()

option(WEFT_INSTALL_PYTHON "cmake --install also installs the Python package" OFF)
# Debian's python3 looks in <prefix>/lib/python3/dist-packages for /usr/local and /usr; elsewhere set this to
# a directory on the interpreter's sys.path.
set(WEFT_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where WEFT_INSTALL_PYTHON puts the package (relative to the install prefix, or absolute)")
if(WEFT_INSTALL_PYTHON)
  install(DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/weft DESTINATION ${WEFT_PYTHON_INSTALL_DIR}
          PATTERN __pycache__ EXCLUDE)
  # The installed package records where the installed library is, so it needs neither WEFT_LIBRARY nor an
  # ldconfig run. Paths are resolved at install time: `cmake --install --prefix` is honoured.
  install(CODE "
    set(_dir \"${WEFT_PYTHON_INSTALL_DIR}\")
    if(NOT IS_ABSOLUTE \"\${_dir}\")
      set(_dir \"\${CMAKE_INSTALL_PREFIX}/\${_dir}\")
    endif()
    set(_lib \"${CMAKE_INSTALL_LIBDIR}/libweft.so.${PROJECT_VERSION_MAJOR}\")
    if(NOT IS_ABSOLUTE \"\${_lib}\")
      set(_lib \"\${CMAKE_INSTALL_PREFIX}/\${_lib}\")
    endif()
    message(STATUS \"Installing: \$ENV{DESTDIR}\${_dir}/weft/_installed.py\")
    file(WRITE \"\$ENV{DESTDIR}\${_dir}/weft/_installed.py\"
         \"# Written by cmake --install: the library this package was installed with.\\nLIBRARY = '\${_lib}'\\n\")
  ")
endif()
