# spirv_embed.cmake - run as `cmake -DSPV=x.spv -DOUT=x.spv.c -DNAME=x -DEXACT=0|1 -DSPIRV_DIS=...
# [-DSPIRV_VAL=...] -P`.
#
# 0. Validates the module (spirv-val, where found): glslang has emitted invalid SPIR-V for some `precise`
#    declarations, which a driver then refuses at run time with no useful message.
# 1. For an exact-contract shader, proves from the disassembly that no multiply and add can be fused:
#    every floating-point arithmetic result (OpFMul, OpFAdd, OpFSub, OpFDiv and the vector and matrix
#    forms) carries the NoContraction decoration, and no GLSL.std.450 Fma appears. A driver is free to fuse
#    anything not so decorated (NVIDIA does; lavapipe happens not to), so this is the only place the exact
#    contract can be enforced before the code reaches a GPU.
# 2. Embeds the SPIR-V words as a C array weft_vk_spv_NAME of weft_vk_spv_NAME_size bytes.
foreach(v SPV OUT NAME EXACT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "spirv_embed.cmake: -D${v}=... is required")
  endif()
endforeach()

if(SPIRV_VAL)
  execute_process(COMMAND ${SPIRV_VAL} --target-env vulkan1.0 ${SPV} OUTPUT_VARIABLE out ERROR_VARIABLE out
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NAME}: spirv-val rejects ${SPV}:\n${out}")
  endif()
endif()

if(EXACT)
  execute_process(COMMAND ${SPIRV_DIS} --raw-id --no-color ${SPV} OUTPUT_VARIABLE dis RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "spirv-dis failed on ${SPV}")
  endif()
  string(REPLACE ";" "\\;" dis "${dis}")
  string(REPLACE "\n" ";" lines "${dis}")
  set(nocontract "")
  set(arith "")
  set(bad "")
  foreach(line IN LISTS lines)
    if(line MATCHES "OpDecorate %([0-9]+) NoContraction")
      list(APPEND nocontract ${CMAKE_MATCH_1})
    elseif(line MATCHES "%([0-9]+) = (OpFMul|OpFAdd|OpFSub|OpFDiv|OpVectorTimesScalar|OpMatrixTimesScalar|OpVectorTimesMatrix|OpMatrixTimesVector|OpMatrixTimesMatrix|OpOuterProduct|OpDot) ")
      list(APPEND arith "${CMAKE_MATCH_1}:${CMAKE_MATCH_2}")
    endif()
    if(line MATCHES "OpExtInst .* Fma ")
      list(APPEND bad "fused multiply-add: ${line}")
    endif()
  endforeach()
  foreach(entry IN LISTS arith)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 id)
    list(GET parts 1 opname)
    list(FIND nocontract ${id} found)
    if(found EQUAL -1)
      list(APPEND bad "%${id} = ${opname} lacks NoContraction (declare the value `precise`)")
    endif()
  endforeach()
  list(LENGTH arith narith)
  if(bad)
    list(LENGTH bad nbad)
    list(SUBLIST bad 0 8 shown)
    string(REPLACE ";" "\n  " shown "${shown}")
    message(FATAL_ERROR "exact-contract shader ${NAME} (${SPV}) could be fused by a driver, ${nbad} problem(s):\n  ${shown}")
  endif()
endif()

file(SIZE ${SPV} nbytes)
math(EXPR rem "${nbytes} % 4")
if(nbytes EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "${SPV} is not a SPIR-V module (${nbytes} bytes)")
endif()
# Bytes as written by glslc (little-endian words), into a word-aligned array.
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/embed_bytes.cmake)
weft_embed_bytes(${SPV} ${OUT} weft_vk_spv_${NAME} 4 "${NAME}.spv by spirv_embed.cmake")
