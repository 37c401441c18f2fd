# python.cmake - the Python package (python/weft and its compiled part, weft._weft: python/csrc on the CPython
# C API over libweft): the extension module built against Debian's python3 and numpy, its pytest suite as the
# CTest test `python`, `pip install ./python` checked in a virtual environment, and, when WEFT_INSTALL_PYTHON
# is on, the package's installation by `cmake --install`.

# Debian's interpreter by default: that is the one python3-numpy and python3-pytest are installed for.
if(EXISTS /usr/bin/python3)
  set(_weft_python_default /usr/bin/python3)
else()
  find_program(_weft_python_default NAMES python3)
endif()
set(WEFT_PYTHON "${_weft_python_default}" CACHE FILEPATH "Python interpreter the Python tests run under")

# The extension module: Python's headers (python3-dev) and numpy's (python3-numpy) for WEFT_PYTHON. Without
# them the module is left out, and the tests say why.
set(Python3_EXECUTABLE "${WEFT_PYTHON}")
find_package(Python3 COMPONENTS Interpreter Development.Module NumPy)
set(_weft_py_missing "")
if(NOT Python3_Development.Module_FOUND)
  set(_weft_py_missing "Python's headers for ${WEFT_PYTHON} (Debian: apt-get install python3-dev)")
elseif(NOT Python3_NumPy_FOUND)
  set(_weft_py_missing "numpy's headers for ${WEFT_PYTHON} (Debian: apt-get install python3-numpy)")
endif()
if(_weft_py_missing)
  message(STATUS "weft: Python extension left out: not found: ${_weft_py_missing}")
else()
  file(GLOB _weft_py_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/csrc/*.c)
  # csrc/gpt_model.c compiles src/gpt/gpt.c, GPT-2 on weft's public API (the CLI links it the same way)
  Python3_add_library(weft_python MODULE ${_weft_py_sources})
  target_include_directories(weft_python PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_include_directories(weft_python SYSTEM PRIVATE ${Python3_NumPy_INCLUDE_DIRS})
  target_link_libraries(weft_python PRIVATE weft Python3::NumPy)
  set_target_properties(weft_python PROPERTIES OUTPUT_NAME _weft
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/weft
                        C_VISIBILITY_PRESET hidden)
endif()

if(BUILD_TESTING AND WEFT_PYTHON)
  set(_weft_py_env "PYTHONDONTWRITEBYTECODE=1")
  if(TARGET weft_python)
    list(APPEND _weft_py_env "WEFT_PYTHON_EXT=$<TARGET_FILE:weft_python>")
  else()
    set(_weft_py_skip "the Python extension was not built: ${_weft_py_missing}")
  endif()
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
  # `pip install ./python` into a fresh virtual environment, against this build's library (not under the
  # sanitizers: the module pip builds carries none)
  if(NOT _weft_py_skip AND NOT WEFT_SANITIZE)
    add_test(NAME python_pip_install COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tests/pip_install.sh ${WEFT_PYTHON}
             $<TARGET_FILE:weft> ${PROJECT_SOURCE_DIR})
    set_tests_properties(python_pip_install PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  endif()
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
  if(TARGET weft_python)
    # the installed module finds the installed library through its run path: relative to itself when both
    # folders are under the prefix, so `cmake --install --prefix` elsewhere keeps them together
    if(IS_ABSOLUTE "${WEFT_PYTHON_INSTALL_DIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
      set(_weft_py_rpath "${CMAKE_INSTALL_FULL_LIBDIR}")
    else()
      file(RELATIVE_PATH _weft_py_rel "/p/${WEFT_PYTHON_INSTALL_DIR}/weft" "/p/${CMAKE_INSTALL_LIBDIR}")
      set(_weft_py_rpath "$ORIGIN/${_weft_py_rel}")
    endif()
    set_target_properties(weft_python PROPERTIES INSTALL_RPATH "${_weft_py_rpath}")
    install(TARGETS weft_python LIBRARY DESTINATION ${WEFT_PYTHON_INSTALL_DIR}/weft)
  endif()
endif()
