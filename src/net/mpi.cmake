# MPI (Debian: openmpi-bin libopenmpi-dev): lanes of the other ranks of an `mpirun` job (mpi:<rank>/<lane>,
# src/lanes/mpi), the serving ranks (src/net/mpi_serve.c, in weft_net with the worker's sessions) and
# data-parallel gradients chained across ranks (src/sched/chain.c). Optional: -DWEFT_MPI=AUTO (built when
# an MPI library is found), ON (required), OFF; without it the weft_mpi_* calls say so (src/net/mpi_none.c)
# and everything else is the same.
set(WEFT_MPI "AUTO" CACHE STRING "Build MPI lanes and data-parallel training: AUTO (if an MPI library is found), ON, OFF")
set(WEFT_HAVE_MPI OFF)
if(NOT WEFT_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(WEFT_HAVE_MPI ON)
  elseif(WEFT_MPI STREQUAL "ON")
    message(FATAL_ERROR "weft: WEFT_MPI=ON but no MPI library was found (Debian: openmpi-bin libopenmpi-dev)")
  else()
    message(STATUS "weft: MPI left out: no MPI library found (Debian: openmpi-bin libopenmpi-dev)")
  endif()
endif()
if(WEFT_HAVE_MPI)
  message(STATUS "weft: MPI lanes and data-parallel training: ${MPI_C_LIBRARIES}")
  target_sources(weft_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi.c ${CMAKE_CURRENT_LIST_DIR}/../lanes/mpi/mpi_lane.c
                                  ${CMAKE_CURRENT_LIST_DIR}/../sched/chain.c)
  target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_MPI)
  target_link_libraries(weft_obj PUBLIC MPI::MPI_C)
  target_link_libraries(weft PUBLIC MPI::MPI_C)
  target_link_libraries(weft_static PUBLIC MPI::MPI_C)
  target_sources(weft_net PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi_serve.c)
  target_compile_definitions(weft_net PUBLIC WEFT_HAVE_MPI)
  if(BUILD_TESTING)
    add_subdirectory(tests/mpi)
  endif()
else()
  target_sources(weft_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi_none.c)
endif()
# What a program built apart from CMake against the static library (the fuzzers, tests/fuzz.sh) links
# besides it: the library's MPI lanes and data-parallel calls.
set(WEFT_FUZZ_LIBS "")
if(WEFT_HAVE_MPI)
  set(WEFT_FUZZ_LIBS ${MPI_C_LIBRARIES})
endif()
